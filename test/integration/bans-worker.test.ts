import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack } from "./stack.js";

const ADMIN = "operator-token-bans-0123456789";
const SLUICE: SluiceInput = {
  key_prefix: "b",
  timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
  routes: [
    {
      name: "login",
      match: "/api/login",
      limits: [{ name: "per-ip", rate: 2, period: "1h", ban: { after: 3, within: "1m", for: ["2m", "10m"] } }],
    },
  ],
};

/** The gateway in workerd (one isolate), a real Redis behind the Upstash-REST bridge, and the admin token. */
const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });

const admin = (path: string, method = "GET", body?: unknown) =>
  call(rig.mf, `/__sluice${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });

const login = (ip: string) => call(rig.mf, "/api/login", { method: "POST", ip });

/** Sends from `ip` until `done` takes the status (a ban is written, and the lists read again, after a response). */
async function until(ip: string, done: (status: number) => boolean, tries = 80): Promise<number> {
  let status = 0;
  for (let i = 0; i < tries; i++) {
    status = (await login(ip)).status;
    if (done(status)) return status;
    await sleep(100);
  }
  return status;
}

interface Listed {
  kind: string;
  entry: string;
  expires_at: string;
  note?: string;
}

describe("escalating bans through the gateway", () => {
  const ip = "203.0.113.40";

  it("bans a client refused `after` times: a 403 from the deny list, listed by the admin API", async () => {
    expect((await login(ip)).status).toBe(200);
    expect((await login(ip)).status).toBe(200);
    const before = Date.now();
    for (let i = 0; i < 3; i++) expect((await login(ip)).status).toBe(429);
    // the third refusal bans, after its response: the isolate that banned denies it next
    expect(await until(ip, (s) => s !== 429, 30)).toBe(403);
    expect((await login("203.0.113.41")).status).toBe(200);

    const listed = (await admin("/lists")).json().entries as Listed[];
    const ban = listed.find((e) => e.entry === ip);
    expect(ban).toMatchObject({ kind: "deny", note: 'ban by route "login", limit "per-ip", level 1' });
    const expires = Date.parse(ban!.expires_at);
    expect(expires).toBeGreaterThanOrEqual(before + 120_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 120_000);
  });

  it("counts the ban in the metrics", async () => {
    const m = await admin("/metrics");
    expect(m.text).toContain("# TYPE sluice_bans_total counter");
    expect(m.text).toContain('sluice_bans_total{route="login",limit="per-ip"} 1\n');
  });

  it("lifts the ban with DELETE: the client is limited as before, not denied", async () => {
    expect((await admin("/lists", "DELETE", { kind: "deny", entry: ip })).status).toBe(200);
    expect(((await admin("/lists")).json().entries as Listed[]).some((e) => e.entry === ip)).toBe(false);
    // the isolate reads the lists again within 5 s; its bucket is still empty (2 an hour)
    const res = await until(ip, (s) => s !== 403);
    expect(res).toBe(429);
  });
});
