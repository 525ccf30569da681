/**
 * Finding 11 of issue 29: client traffic erased the audit trail. Session refusals (409) were
 * ledgered into the same capped stream as the operators' changes, so a client refused often
 * enough (within its limits) trimmed every admin entry away. Now the operators' changes go to a
 * stream of their own (`{key_prefix}:audit`), which no client writes, and a session's refusals are
 * counted (`sluice_session_refusals_total`), not ledgered; `GET /__sluice/ledger` reads both trails,
 * merged newest first.
 *
 * And the note on the export: an NDJSON export of a long ledger read it whole in one answer (a
 * million entries: about 2,000 XREVRANGE subrequests, past the Workers limit). Now each answer reads
 * at most 20 pages and says where the next one starts (`next_cursor`, `Link: rel="next"`).
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { RespClient } from "@sluice/dev";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, commandCalls, sleep, useStack } from "../integration/stack.js";

const ADMIN = "audit-trail-admin-token-0123456789";
const bearer = { authorization: `Bearer ${ADMIN}` };

/** An origin that answers at once, but holds `/agent/hold` until the test opens the gate. */
async function gateOrigin() {
  const held: Array<() => void> = [];
  const server = createServer((req, res) => {
    const answer = () => res.writeHead(200, { "content-type": "application/json" }).end("{}");
    if (req.url?.startsWith("/agent/hold")) held.push(answer);
    else answer();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    held,
    open: () => held.splice(0).forEach((answer) => answer()),
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe("client traffic cannot push the operators' changes out", () => {
  const SLUICE: SluiceInput = {
    key_prefix: "at",
    timeout_ms: 1_000,
    ledger_length: 100,
    routes: [
      { name: "agent", match: "/agent/*", session: { key: "header:x-session" } },
      { name: "orders", match: "/orders", idempotency: {} },
    ],
  };
  const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN }, origin: gateOrigin });
  const admin = (path: string, method: string, body: unknown) =>
    call(rig.mf, `/__sluice${path}`, {
      method,
      headers: { ...bearer, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const trail = async (query = "") =>
    (await call(rig.mf, `/__sluice/ledger?count=10000${query}`, { headers: bearer })).json().entries as Array<
      Record<string, string>
    >;

  it("400 session refusals and 150 first arrivals later, every admin change is still there", async () => {
    expect((await admin("/lists", "PUT", { kind: "deny", entry: "198.51.100.9", ttl: "1h" })).status).toBe(200);
    expect((await admin("/routes/orders/mode", "PUT", { mode: "open", ttl: "1h", note: "drill" })).status).toBe(200);
    expect((await admin("/routes/orders/mode", "PUT", { mode: "normal" })).status).toBe(200);
    const changes = ["admin_route_mode", "admin_route_mode", "admin_ban"];

    // one call holds the session at the origin while the same client is refused, again and again
    const session = { "x-session": "s-1" };
    const held = call(rig.mf, "/agent/hold", { method: "POST", headers: session });
    for (let i = 0; i < 500 && rig.origin.held.length === 0; i++) await sleep(20);
    let refused = 0;
    while (refused < 400 && (await call(rig.mf, "/agent/x", { method: "POST", headers: session })).status === 409)
      refused++;
    expect(refused).toBe(400);
    // legitimate outcomes fill the ledger too (two entries each): past its length, it trims its own
    for (let i = 0; i < 150; i++)
      expect((await call(rig.mf, "/orders", { method: "POST", headers: { "idempotency-key": `o-${i}` } })).status).toBe(
        200,
      );
    rig.origin.open();
    expect((await held).status).toBe(200);

    const all = await trail();
    expect(all.filter((e) => e.event?.startsWith("admin_")).map((e) => e.event)).toEqual(changes);
    expect(all.some((e) => e.event === "session_refused")).toBe(false);
    expect((await trail("&trail=audit")).map((e) => e.event)).toEqual(changes);
    expect((await trail("&trail=ledger")).some((e) => e.event?.startsWith("admin_"))).toBe(false);

    const metrics = await call(rig.mf, "/__sluice/metrics", { headers: bearer });
    expect(metrics.text).toContain('sluice_session_refusals_total{route="agent"} 400\n');
  });

  it("an operator's change and the trail's TTL are one write: an EXPIRE lost on its way cannot leave the trail without one", async () => {
    await rig.redis.del("at:audit");
    // the review's sequence: the XADD lands, the separate EXPIRE after it is lost
    rig.stack.bridge.dropNext({ match: (c) => (c[0] ?? "").toLowerCase() === "expire" && c[1] === "at:audit" });
    const r = await admin("/lists", "PUT", { kind: "deny", entry: "198.51.100.10", ttl: "1h" });
    expect(r.status, r.text).toBe(200);
    expect((await trail("&trail=audit")).map((e) => e.event)).toEqual(["admin_ban"]);
    expect(await rig.redis.pttl("at:audit"), "the audit trail has its TTL").toBeGreaterThan(0);
  });
});

describe("an export of a long ledger is paged, each answer within a bounded number of reads", () => {
  const PREFIX = "ax";
  const SEEDED = 12_000;
  const rig = useStack({
    sluice: { key_prefix: PREFIX, timeout_ms: 2_000, ledger_length: 1_000_000, routes: [] },
    bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
  });
  let resp: RespClient | undefined;
  afterAll(() => resp?.close());

  /** The ledger as a long-running deployment has it: 12 000 outcomes, seeded straight into the stream. */
  async function seed(): Promise<void> {
    resp = RespClient.fromUrl(rig.stack.redis.url);
    for (let i = 0; i < SEEDED; i += 1_000) {
      const batch = Array.from({ length: 1_000 }, (_, j) => [
        "XADD",
        `${PREFIX}:ledger`,
        "*",
        ...["event", "claim", "route", `r${(i + j) % 3}`, "key", "k".repeat(32), "at", String(i + j)],
      ]);
      await resp.sendMany(batch);
    }
  }
  const xrevranges = async () => (await commandCalls(rig.stack)).xrevrange ?? 0;

  it("follows `next` to the end: every entry once, no answer past 20 reads", async () => {
    await seed();
    const seen = new Set<string>();
    let url: string | null = "/__sluice/ledger?format=ndjson";
    let answers = 0;
    while (url && answers < 10) {
      const before = await xrevranges();
      const r = await call(rig.mf, url, { headers: bearer });
      expect(r.status).toBe(200);
      expect((await xrevranges()) - before).toBeLessThanOrEqual(20);
      for (const line of r.text.split("\n").filter(Boolean)) seen.add((JSON.parse(line) as { id: string }).id);
      url = /^<([^>]+)>; rel="next"$/.exec(r.headers.get("link") ?? "")?.[1] ?? null;
      answers++;
    }
    expect(url).toBeNull();
    expect(seen.size).toBe(SEEDED);
    expect(answers).toBeGreaterThan(1);
  });

  it("a filter that matches little still answers within 20 reads, and its cursor goes on from there", async () => {
    const before = await xrevranges();
    const first = await call(rig.mf, "/__sluice/ledger?route=none", { headers: bearer });
    expect((await xrevranges()) - before).toBeLessThanOrEqual(20);
    const body = first.json() as { entries: unknown[]; next_cursor: string | null };
    expect(body.entries).toEqual([]);
    expect(body.next_cursor).toMatch(/^\d+-\d+~done$/);
    const rest = await call(rig.mf, `/__sluice/ledger?route=none&cursor=${body.next_cursor}`, { headers: bearer });
    expect(rest.json()).toEqual({ entries: [], next_cursor: null });
    expect((await call(rig.mf, "/__sluice/ledger?cursor=nonsense", { headers: bearer })).status).toBe(400);
  });
});
