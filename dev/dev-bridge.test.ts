/**
 * `npm run dev`'s bridge keeps its address and token from one start to the next (issue 30, point
 * 10): an app's `.dev.vars` pointing at it stays right after a restart.
 */
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { devBridgePort, devBridgeToken, devVarsLines, DEV_BRIDGE_PORT, startDevBridge } from "./dev-bridge.js";
import { freePort } from "./ports.js";
import { startRedis, type RedisProcess } from "./redis-process.js";

const dir = mkdtempSync(join(tmpdir(), "sluice-dev-bridge-"));
let redis: RedisProcess;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** PING through a bridge with a token: the status it answers. */
async function ping(url: string, token: string): Promise<number> {
  const res = await fetch(url, { method: "POST", headers: { authorization: `Bearer ${token}` }, body: '["ping"]' });
  await res.text();
  return res.status;
}

describe("the dev bridge's token", () => {
  it("is made once and kept, readable by its owner alone; the next start reads the same", () => {
    const state = join(dir, "kept");
    const token = devBridgeToken(state);
    expect(token).toMatch(/^[0-9a-f]{32}$/);
    expect(statSync(join(state, "bridge-token")).mode & 0o777).toBe(0o600);
    expect(devBridgeToken(state)).toBe(token);
  });

  it("is made anew when the kept file holds no token", () => {
    const state = join(dir, "spoiled");
    const first = devBridgeToken(state);
    writeFileSync(join(state, "bridge-token"), "not a token\n");
    const second = devBridgeToken(state);
    expect(second).toMatch(/^[0-9a-f]{32}$/);
    expect(second).not.toBe(first);
  });
});

describe("the dev bridge's port", () => {
  it("is the one asked for, and another (the same token) only while that one is taken", async () => {
    const state = join(dir, "ports");
    const preferred = await freePort();
    const first = await startDevBridge({ redisUrl: redis.url, port: preferred, stateDir: state });
    try {
      expect(first.bridge.port).toBe(preferred);
      const second = await startDevBridge({ redisUrl: redis.url, port: preferred, stateDir: state });
      try {
        expect(second.bridge.port).not.toBe(preferred);
        expect(second.token).toBe(first.token);
        expect(await ping(second.bridge.url, second.token)).toBe(200);
      } finally {
        await second.bridge.close();
      }
      expect(await ping(first.bridge.url, first.token)).toBe(200);
    } finally {
      await first.bridge.close();
    }
    // a restart: the same port again, and the same token
    const again = await startDevBridge({ redisUrl: redis.url, port: preferred, stateDir: state });
    try {
      expect([again.bridge.port, again.token]).toEqual([preferred, first.token]);
    } finally {
      await again.bridge.close();
    }
  });

  it("is 8789 unless SLUICE_BRIDGE_PORT names another", () => {
    expect(devBridgePort(undefined)).toBe(DEV_BRIDGE_PORT);
    expect(devBridgePort("")).toBe(8789);
    expect(devBridgePort("9001")).toBe(9001);
    expect(() => devBridgePort("http")).toThrow(/SLUICE_BRIDGE_PORT must be a port number/);
  });

  it("is printed with the token as the lines an app's .dev.vars needs", () => {
    expect(devVarsLines("http://127.0.0.1:8789", "abc")).toEqual([
      "UPSTASH_REDIS_REST_URL=http://127.0.0.1:8789",
      "UPSTASH_REDIS_REST_TOKEN=abc",
    ]);
  });
});
