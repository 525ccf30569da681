/**
 * The idempotency figures end to end, in workerd against a real Redis: a scripted storm of first
 * arrivals, replays, duplicates in flight, mismatches and a failing first arrival, across two
 * isolates, whose `sluice_idempotency_total` counts (read from `GET /__sluice/metrics`) equal what
 * was sent, and none of it counted as a limit's `decision="reject"`; the `traceparent` each claim
 * forwards and leaves in the ledger; the ledger's filters and its NDJSON export.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { parseTraceparent } from "../../src/util/traceparent.js";
import { call, type DemoOrigin, sleep, useStack } from "./stack.js";

const ADMIN = "figures-admin-token-0123456789";
const SLUICE: SluiceInput = {
  key_prefix: "fig",
  timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
  ledger_length: 5_000,
  routes: [
    { name: "storm", match: "/storm", idempotency: {} },
    { name: "traced", match: "/traced", idempotency: {}, session: { key: "header:x-session-id" } },
  ],
};

const rig = useStack({ sluice: SLUICE, instances: 2, bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
let origin: DemoOrigin;
let workers: readonly Miniflare[];
let mf: Miniflare;
beforeAll(() => {
  ({ origin, workers, mf } = rig);
});

const admin = { authorization: `Bearer ${ADMIN}` };
const post = (w: Miniflare, path: string, key: string, body: string, headers: Record<string, string> = {}) =>
  call(w, path, {
    method: "POST",
    body,
    headers: { "content-type": "application/json", "idempotency-key": key, ...headers },
  });
type Entry = Record<string, string>;
const ledger = async (query = "") =>
  (await call(mf, `/__sluice/ledger?count=5000${query}`, { headers: admin })).json().entries as Entry[];
/** Until `n` entries of `event` are in the ledger for `route` (answers are stored after the response). */
async function untilLedgered(route: string, event: string, n: number): Promise<Entry[]> {
  let found: Entry[] = [];
  for (let i = 0; i < 100 && found.length < n; i++) {
    found = (await ledger(`&route=${route}`)).filter((e) => e.event === event);
    if (found.length < n) await sleep(50);
  }
  return found;
}
/** The Prometheus text after every isolate flushed its counts (a scrape flushes the scraped isolate's). */
async function metrics(): Promise<string> {
  for (const w of workers.slice(1)) await call(w, "/__sluice/metrics", { headers: admin });
  const r = await call(mf, "/__sluice/metrics", { headers: admin });
  expect(r.status).toBe(200);
  return r.text;
}
const sample = (text: string, series: string) => {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};
const outcome = (text: string, o: string) => sample(text, `sluice_idempotency_total{route="storm",outcome="${o}"}`);

describe("the figures of a storm", () => {
  const N = 6; // first arrivals answered at once
  const M = 5; // replays of them
  const K = 3; // duplicates of a slow first arrival while it runs
  const X = 2; // keys reused with another body

  it("count exactly what was sent, by outcome, and no idempotency refusal as a limit's reject", async () => {
    const fast = await Promise.all(
      Array.from({ length: N }, (_, i) => post(workers[i % 2]!, "/storm?status=201", `s-${i}`, `{"n":${i}}`)),
    );
    expect(fast.map((r) => r.status)).toEqual(Array(N).fill(201));
    // the answers are stored after the responses: replays only once all are
    expect(await untilLedgered("storm", "complete", N)).toHaveLength(N);

    const replays = await Promise.all(
      Array.from({ length: M }, (_, i) => post(workers[(i + 1) % 2]!, "/storm?status=201", `s-${i}`, `{"n":${i}}`)),
    );
    expect(replays.map((r) => r.headers.get("idempotent-replayed"))).toEqual(Array(M).fill("true"));

    const slow = post(mf, "/storm?delay=1500", "slow-1", "{}");
    await sleep(300);
    const inFlight = await Promise.all(
      Array.from({ length: K }, () => post(workers[1]!, "/storm?delay=1500", "slow-1", "{}")),
    );
    expect(inFlight.map((r) => [r.status, r.headers.get("sluice-decision")])).toEqual(Array(K).fill([409, "reject"]));
    expect((await slow).status).toBe(200);

    const mismatches = await Promise.all(
      Array.from({ length: X }, (_, i) => post(workers[i % 2]!, "/storm?status=201", "s-0", `{"other":${i}}`)),
    );
    expect(mismatches.map((r) => r.status)).toEqual(Array(X).fill(422));

    const failed = await post(mf, "/storm?status=503", "fails-1", "{}");
    expect(failed.status).toBe(503);
    expect(origin.seen.filter((s) => s.path === "/storm")).toHaveLength(N + 2);

    const text = await metrics();
    expect(outcome(text, "first")).toBe(N + 2);
    expect(outcome(text, "replay")).toBe(M);
    expect(outcome(text, "in_flight")).toBe(K);
    expect(outcome(text, "mismatch")).toBe(X);
    expect(outcome(text, "released")).toBe(1);
    for (const o of ["indeterminate", "taken_over", "late_answer"]) expect(outcome(text, o)).toBe(0);
    // every first arrival's origin latency, the failed one among them
    const histogram = 'sluice_idempotency_first_arrival_latency_ms_count{route="storm"}';
    expect(sample(text, histogram)).toBe(N + 2);
    expect(sample(text, 'sluice_idempotency_first_arrival_latency_ms_bucket{route="storm",le="+Inf"}')).toBe(N + 2);
    // the slow one took at least 1.5 s: it is not under the 1024 ms bound (the others may be, on a loaded machine)
    expect(
      sample(text, 'sluice_idempotency_first_arrival_latency_ms_bucket{route="storm",le="1024"}'),
    ).toBeLessThanOrEqual(N + 1);
    expect(sample(text, 'sluice_idempotency_first_arrival_failures_total{route="storm"}')).toBe(1);
    // the 409s and 422s are counted there, not as refusals of a limit
    expect(text).not.toMatch(/sluice_decisions_total\{route="storm",[^}]*decision="reject"\}/);
    expect(sample(text, 'sluice_decisions_total{route="storm",limit="-",decision="replay"}')).toBe(M);

    const dashboard = (await call(mf, "/__sluice/api/dashboard", { headers: admin })).json() as {
      idempotency: Array<Record<string, unknown>>;
    };
    expect(dashboard.idempotency.find((r) => r.route === "storm")).toMatchObject({
      duplicates: M + K,
      suppression_rate: 1,
      first_arrivals: N + 2,
      first_failures: 1,
    });
  });
});

describe("the trace and the ledger", () => {
  const TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const OTHER = "00-11111111111111111111111111111111-2222222222222222-01";
  const seenWith = (key: string) => origin.seen.filter((s) => s.headers["idempotency-key"] === key);
  const HASH = /^[0-9a-f]{32}$/;

  it("forwards the request's traceparent and ledgers claim, completion and replay with it, the principal and session hashed", async () => {
    const session = { "x-session-id": "sess-9" };
    const first = await post(mf, "/traced?status=201", "t-1", "{}", { traceparent: TRACE, ...session });
    expect(first.status).toBe(201);
    expect(seenWith("t-1")[0]?.headers.traceparent).toBe(TRACE);
    const [complete] = await untilLedgered("traced", "complete", 1);
    const replay = await post(workers[1]!, "/traced?status=201", "t-1", "{}", { traceparent: OTHER, ...session });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");

    const byKey = await ledger(`&key=${complete?.key}`);
    expect(byKey.map((e) => e.event)).toEqual(["replay", "complete", "claim"]); // newest first
    expect(byKey.map((e) => e.trace)).toEqual([OTHER, TRACE, TRACE]); // each request's own trace
    for (const e of byKey) {
      expect(e.principal).toMatch(HASH); // never the client's IP itself
      expect(e.session).toMatch(HASH);
      expect(e.session).not.toBe("sess-9");
    }
    expect(complete).toMatchObject({ status: "201", latency_ms: expect.stringMatching(/^\d+$/) });
  });

  it("makes up a valid traceparent for a request with an invalid one, forwards it and ledgers it, a release too", async () => {
    const r = await post(mf, "/traced?status=503", "t-2", "{}", { traceparent: "00-not-a-trace" });
    expect(r.status).toBe(503);
    const sent = String(seenWith("t-2")[0]?.headers.traceparent);
    expect(parseTraceparent(sent)).toBe(sent);
    const release = (await ledger("&route=traced")).find((e) => e.event === "release" && e.trace === sent);
    expect(release).toMatchObject({ status: "503", latency_ms: expect.stringMatching(/^\d+$/) });
    const claim = (await ledger(`&key=${release?.key}`)).find((e) => e.event === "claim");
    expect(claim?.trace).toBe(sent);
  });

  it("filters by principal and since, exports NDJSON, and refuses a malformed filter or a missing token", async () => {
    const before = Date.now() - 1; // the ledger's clock is Redis's, the same machine's
    await post(mf, "/traced?status=201", "t-3", "{}", {}); // from 203.0.113.1, as the others
    await call(mf, "/traced?status=201", {
      method: "POST",
      ip: "198.51.100.7",
      body: "{}",
      headers: { "content-type": "application/json", "idempotency-key": "t-3" },
    });
    await untilLedgered("traced", "complete", 3);
    const recent = await ledger(`&route=traced&since=${before}`);
    expect(recent.filter((e) => e.event === "claim")).toHaveLength(2);
    expect(recent.every((e) => Number(e.at) >= before)).toBe(true);
    const principals = [...new Set(recent.map((e) => e.principal))];
    expect(principals).toHaveLength(2);
    const mine = await ledger(`&route=traced&principal=${principals[0]}`);
    expect(mine.length).toBeGreaterThan(0);
    expect(mine.every((e) => e.principal === principals[0])).toBe(true);

    for (const how of [
      { query: "&format=ndjson", headers: admin },
      { query: "", headers: { ...admin, accept: "application/x-ndjson" } },
    ]) {
      const r = await call(mf, `/__sluice/ledger?route=traced&since=${before}${how.query}`, { headers: how.headers });
      expect(r.status).toBe(200);
      expect(r.headers.get("content-type")).toMatch(/^application\/x-ndjson/);
      const lines = r.text
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l) as Entry);
      expect(lines.map((e) => e.id)).toEqual(recent.map((e) => e.id));
    }
    const bad = await call(mf, "/__sluice/ledger?key=not-a-hash", { headers: admin });
    expect([bad.status, bad.json().detail]).toEqual([400, "key: must be a key hash as the ledger shows it"]);
    expect((await call(mf, "/__sluice/ledger?since=yesterday", { headers: admin })).status).toBe(400);
    expect((await call(mf, "/__sluice/ledger?route=traced")).status).toBe(401);
  });
});
