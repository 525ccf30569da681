import { describe, expect, it } from "vitest";
import { loadConfig, type Limit } from "../../../config/index.js";
import { hashIdentifier } from "../../../identity/hash.js";
import type { RequestFacts } from "../../../identity/identify.js";
import { clientOf, countedJob } from "./depth.js";

function limitOf(key: unknown): Limit {
  const loaded = loadConfig({
    ORIGIN_URL: "http://origin.test",
    SLUICE: {
      routes: [{ name: "q", match: "/q", on_limit: "queue", limits: [{ name: "l", key, rate: 1, period: "1s" }] }],
    },
  });
  if (!loaded.ok) throw loaded.error;
  return loaded.config.routes[0]?.limits[0] as Limit;
}

const facts = (ip: string, claims?: Record<string, unknown>, headers: Record<string, string> = {}): RequestFacts => ({
  ip,
  matchPath: "/q",
  headers: new Headers(headers),
  url: new URL("https://x.test/q"),
  ...(claims ? { claims } : {}),
});

describe("the client a queued job counts against", () => {
  it("is the identity the refusing limit keys on", async () => {
    const perUser = limitOf("jwt:sub");
    // one user from two addresses is one client; two users behind one address are two
    expect(await clientOf(perUser, facts("192.0.2.1", { sub: "alice" }))).toBe(
      await clientOf(perUser, facts("192.0.2.2", { sub: "alice" })),
    );
    expect(await clientOf(perUser, facts("192.0.2.1", { sub: "alice" }))).not.toBe(
      await clientOf(perUser, facts("192.0.2.1", { sub: "bob" })),
    );
    // two limits keyed alike name the same client
    expect(await clientOf(limitOf("ip"), facts("192.0.2.1"))).toBe(await clientOf(limitOf(["ip"]), facts("192.0.2.1")));
  });

  it("is the IP for a limit that names no client (global, path), and where the limit's part is missing", async () => {
    const byIp = await clientOf(limitOf("ip"), facts("192.0.2.1"));
    expect(await clientOf(limitOf("global"), facts("192.0.2.1"))).toBe(byIp);
    expect(await clientOf(limitOf(["global", "path"]), facts("192.0.2.1"))).toBe(byIp);
    expect(await clientOf(limitOf("global"), facts("192.0.2.2"))).not.toBe(byIp);
    // a missing key part falls back to the IP, tagged, as the limit's own bucket does
    const missing = await clientOf(limitOf("header:x-api-key"), facts("192.0.2.1"));
    expect(missing).not.toBe(byIp);
    expect(missing).toBe(await clientOf(limitOf("header:x-api-key"), facts("192.0.2.1")));
    expect(await clientOf(limitOf("header:x-api-key"), facts("192.0.2.1", undefined, { "x-api-key": "k" }))).toBe(
      await hashIdentifier('[["header:x-api-key","k"]]'),
    );
  });

  it("is read back from a job only when it is a hash: anything else names no key", () => {
    const hash = "0123456789abcdef0123456789abcdef";
    expect(countedJob({ id: "j", client: hash })).toEqual({ id: "j", client: hash });
    expect(countedJob({ id: "j", client: "qs:lists" })).toEqual({ id: "j" });
    expect(countedJob({ id: "j" })).toEqual({ id: "j" });
  });
});
