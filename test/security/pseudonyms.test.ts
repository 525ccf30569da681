/**
 * Finding 14 of issue 29: hashed ids were reversible. The ledger's principal, the sessions' lock
 * ids in the ledger, and the dashboard's and the logs' ids of refused clients were the unsalted
 * SHA-256 of key names: hashing the addresses of a /8 found an IP in 26 s on one core, with
 * `labels = "off"`. Now every id that leaves a key name is an HMAC of it under the deployment's
 * secret (`SLUICE_ID_KEY`, else `SLUICE_ADMIN_TOKEN`), while the key names keep their plain hash
 * (no deployment loses its buckets). The attack is replayed here on a /24: every candidate's
 * hashes are computed as the key names are, and none is what the ledger, dashboard or logs show.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import { RespClient } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { hashIdentifier } from "../../src/identity/hash.js";
import { call, sleep, useStack } from "../integration/stack.js";

const ADMIN = "pseudonyms-admin-token-0123456789";
const ID_KEY = "pseudonyms-id-key-abcdef0123456789";
const PREFIX = "ps";
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  timeout_ms: 1_000,
  labels: "off",
  routes: [
    { name: "api", match: "/api/*", limits: [{ name: "per-ip", key: "ip", rate: 1, period: "1h" }] },
    { name: "orders", match: "/orders", idempotency: { principal: "ip" }, session: { key: "header:x-session" } },
  ],
};
const NET = "203.0.113";
const CLIENT = `${NET}.77`;

/** A Worker of the file's Redis with these secrets, its log lines (JSON) collected. */
function loggedWorker(rig: ReturnType<typeof useStack>, bindings: Record<string, string>) {
  const lines: Array<Record<string, unknown>> = [];
  const mf = rig.worker({
    sluice: SLUICE,
    bindings,
    stdout: (text) => {
      for (const line of text.split("\n"))
        if (line.startsWith("{")) lines.push(JSON.parse(line) as Record<string, unknown>);
    },
  });
  return { mf, lines };
}

/** What an attacker holding a log or an export computes: each candidate address's hashes, as the key names have them. */
async function candidates(region: string): Promise<Map<string, string>> {
  const byHash = new Map<string, string>();
  for (let i = 0; i < 256; i++) {
    const ip = `${NET}.${i}`;
    const principal = JSON.stringify([["ip", ip]]);
    byHash.set(await hashIdentifier(`${principal}@${region}`), ip); // the bucket of a per-ip limit
    byHash.set(await hashIdentifier(principal), ip); // the idempotency principal
    byHash.set(await hashIdentifier(JSON.stringify([principal, JSON.stringify([["header:x-session", "s-1"]])])), ip); // the session lock
  }
  return byHash;
}

const rig = useStack({ origin: {} });
let a: ReturnType<typeof loggedWorker>;
let b: ReturnType<typeof loggedWorker>;
let c: ReturnType<typeof loggedWorker>;
beforeAll(async () => {
  a = loggedWorker(rig, { SLUICE_ADMIN_TOKEN: ADMIN });
  b = loggedWorker(rig, { SLUICE_ADMIN_TOKEN: ADMIN, SLUICE_ID_KEY: ID_KEY });
  c = loggedWorker(rig, { SLUICE_ADMIN_TOKEN: ADMIN, SLUICE_ID_KEY: ID_KEY });
  await Promise.all([a.mf.ready, b.mf.ready, c.mf.ready]);
});

const bearer = { authorization: `Bearer ${ADMIN}` };
type Logged = { mf: Miniflare; lines: Array<Record<string, unknown>> };
const refusals = (w: Logged) => w.lines.filter((l) => l.event === "decision" && l.decision === "reject");
const refusedId = async (w: Logged) => {
  await call(w.mf, "/api/x", { ip: CLIENT });
  const before = refusals(w).length;
  const refused = await call(w.mf, "/api/x", { ip: CLIENT });
  expect(refused.status).toBe(429);
  return { id: await refusalAfter(w, before), region: refused.headers.get("sluice-region") ?? "" };
};
/** The id of the first refusal a Worker logged after `before` of them (its output arrives on its own time: polled, at most ~5 s). */
async function refusalAfter(w: Logged, before: number): Promise<string> {
  for (let i = 0; i < 100 && refusals(w).length <= before; i++) await sleep(50);
  return String(refusals(w)[before]?.id);
}

describe("the ids that leave key names are keyed", () => {
  it("a refused client: the log's and the dashboard's id is no hash a guess can be tested against; its bucket keeps its name", async () => {
    const { id, region } = await refusedId(a);
    const guesses = await candidates(region);
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(guesses.get(id)).toBeUndefined();
    // the bucket is where it always was: named by the plain hash, which never leaves Redis
    const bucket = await hashIdentifier(`${JSON.stringify([["ip", CLIENT]])}@${region}`);
    expect(guesses.get(bucket)).toBe(CLIENT);
    const resp = RespClient.fromUrl(rig.stack.redis.url);
    try {
      expect(await resp.send(["EXISTS", `${PREFIX}:api:per-ip:${bucket}`])).toBe(1);
    } finally {
      resp.close();
    }
    // the dashboard shows the same keyed id (the scrape flushes the isolate's counts first)
    expect((await call(a.mf, "/__sluice/metrics", { headers: bearer })).status).toBe(200);
    const dash = (await call(a.mf, "/__sluice/api/dashboard", { headers: bearer })).json() as {
      top_blocked: Array<{ id: string }>;
    };
    expect(dash.top_blocked.map((r) => r.id)).toEqual([id]);
    for (const row of dash.top_blocked) expect(guesses.get(row.id)).toBeUndefined();
  });

  it("the ledger's principal and session ids, and the log's, are keyed alike", async () => {
    const post = (key: string) =>
      call(a.mf, "/orders", { method: "POST", ip: CLIENT, headers: { "idempotency-key": key, "x-session": "s-1" } });
    expect((await post("k-1")).status).toBe(200);
    const entries = (await call(a.mf, "/__sluice/ledger?count=50", { headers: bearer })).json().entries as Array<
      Record<string, string>
    >;
    const guesses = await candidates("any"); // the principal's and the lock's hashes name no region
    const principals = entries.filter((e) => e.principal).map((e) => e.principal as string);
    const locks = entries.filter((e) => e.event?.startsWith("session_")).map((e) => e.key as string);
    const sessions = entries.filter((e) => e.session).map((e) => e.session as string);
    expect(principals.length).toBeGreaterThan(0);
    expect(locks.length).toBeGreaterThan(0);
    expect(sessions.length).toBeGreaterThan(0);
    for (const id of [...principals, ...locks]) {
      expect(id).toMatch(/^[0-9a-f]{32}$/);
      expect(guesses.get(id), id).toBeUndefined();
    }
    expect(sessions).not.toContain(await hashIdentifier("s-1"));
    for (let i = 0; i < 100 && !a.lines.some((l) => l.event === "idempotency"); i++) await sleep(50);
    const logged = a.lines.filter((l) => l.event === "idempotency").map((l) => l.principal);
    expect(logged.length).toBeGreaterThan(0);
    for (const p of logged) expect(principals).toContain(p);
  });

  it("SLUICE_ID_KEY, when set, is the key: the same id on every isolate that has it, another than the admin token's", async () => {
    const fromA = await refusedIdFor(a, `${NET}.78`);
    const fromB = await refusedIdFor(b, `${NET}.79`);
    const fromC = await refusedIdFor(c, `${NET}.79`);
    expect(fromB).toBe(fromC);
    const fromAForSame = await refusedIdFor(a, `${NET}.79`);
    expect(fromAForSame).not.toBe(fromB);
    expect(fromA).not.toBe(fromAForSame);
  });
});

async function refusedIdFor(w: Logged, ip: string): Promise<string> {
  // each worker's bucket of the client is the same (one Redis): the first request may already be refused
  await call(w.mf, "/api/x", { ip });
  const before = refusals(w).length;
  expect((await call(w.mf, "/api/x", { ip })).status).toBe(429);
  return refusalAfter(w, before);
}
