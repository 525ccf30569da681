/**
 * Issue 29, finding 3: a session's lock ended before its call did. It was released when the
 * response left (a 504 at `origin_timeout` while the origin still worked), nothing renewed it (a
 * call longer than `lease` was taken over), and a queued job held it only for `lease`: the
 * session's next call ran beside the first at the origin. Now the lock is renewed while the call
 * and its late-answer wait run, released once the outcome is known, and a queued job holds it for
 * the job's life.
 *
 * The review of those fixes found the lock still handed on while the first call may run: it was
 * released as soon as the reply was in, also when the reply said nothing of the outcome (a
 * connection cut after the request was read, a late answer that never came); and a `lease`
 * shorter than the renewal loop can keep (renewals every max(100 ms, lease / 3)) was accepted, so a
 * live call's lock lapsed between renewals. Now an unknown outcome stops the renewals and lets the
 * lease run out (no release), and a lease under 1 s is refused at load, naming the field.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack } from "../integration/stack.js";
import { startSickOrigin, type SickOrigin } from "../support/sick-origin.js";
import { pollUntil, sessionLocks, untilRedisPast } from "../support/guard-records.js";

const PREFIX = "sl";
const session = (extra: Record<string, unknown> = {}) => ({ key: "header:x-session-id", ...extra });
const SLUICE: SluiceInput = {
  key_prefix: PREFIX,
  // about guards, not latency: a loaded machine must not turn locks into 503s
  timeout_ms: 5_000,
  routes: [
    { name: "timeout", match: "/timeout/*", methods: ["POST"], origin_timeout: "1s", session: session() },
    // accepted at load: a lease far shorter than the calls it guards
    { name: "long", match: "/long/*", methods: ["POST"], origin_timeout: "20s", session: session({ lease: "2s" }) },
    {
      name: "queued",
      match: "/queued/*",
      methods: ["POST"],
      on_limit: "queue",
      limits: [{ name: "provider", key: "global", rate: 1, period: "6s", burst: 1 }],
      session: session({ lease: "1s" }),
    },
  ],
};

const rig = useStack({ sluice: SLUICE, queues: true, origin: startSickOrigin });
let origin: SickOrigin;
let mf: Miniflare;
beforeAll(() => {
  ({ origin, mf } = rig);
});

type Answer = Awaited<ReturnType<typeof call>>;
const post = (path: string, sessionId: string) =>
  call(mf, path, {
    method: "POST",
    ip: "203.0.113.70",
    body: JSON.stringify({ session: sessionId, path }),
    headers: { "content-type": "application/json", "x-session-id": sessionId },
  });
const show = (r: Answer) => `${r.status} ${r.headers.get("sluice-decision")} ${r.text.slice(0, 200)}`;
/** The session's calls that reached the origin (a queued one keeps no client header: the body names it). */
const calls = (sessionId: string) => origin.seen.filter((s) => s.body.includes(`"session":"${sessionId}"`));
const reached = (sessionId: string) => calls(sessionId).length;
/** The session's lock (there is one per session and principal; these tests use one principal). */
const lockOf = async (sessionId: string) => {
  const locks = await sessionLocks(rig.redis, PREFIX);
  // the lock names no session in the clear: the one whose fence the origin was told is this session's
  const fences = new Set(calls(sessionId).map((s) => String(s.headers["sluice-fencing-token"])));
  return (
    locks.find((l) => fences.has(l.fields.fence ?? "")) ??
    locks.sort((a, b) => Number(b.fields.fence) - Number(a.fields.fence))[0]
  );
};

describe("finding 3: a session's lock lasts as long as its call", () => {
  it("a 504 is not the end of the call: the lock is held until the origin's answer, then released", async () => {
    origin.hold();
    const first = await post("/timeout/hold", "s-timeout");
    expect(first.status, show(first)).toBe(504);
    expect(reached("s-timeout")).toBe(1);
    const next = await post("/timeout/quick", "s-timeout");
    expect(next.status, `the session's next call must not overlap the first at the origin: ${show(next)}`).toBe(409);
    expect(next.json()).toMatchObject({ title: "Session busy" });
    expect(reached("s-timeout")).toBe(1);

    origin.release();
    // the late answer is in: the lock goes, and the session's next call runs
    expect(
      await pollUntil(
        () => sessionLocks(rig.redis, PREFIX),
        (l) => l.length === 0,
      ),
    ).toHaveLength(0);
    const after = await post("/timeout/quick", "s-timeout");
    expect(after.status, show(after)).toBe(200);
  }, 60_000);

  it("a call longer than the lease keeps its lock: the session's next call is refused, not run beside it", async () => {
    origin.hold();
    const first = post("/long/hold", "s-long");
    await pollUntil(
      async () => reached("s-long"),
      (n) => n === 1,
    );
    const granted = await lockOf("s-long");
    // past the lease as it was granted (2 s): an unrenewed lock would be taken over now
    await untilRedisPast(rig.redis, Number(granted?.fields.lease_until) + 1_500);
    const next = await post("/long/quick", "s-long");
    expect(next.status, `the session's next call must not take the lock of a live call: ${show(next)}`).toBe(409);
    expect(reached("s-long")).toBe(1);
    origin.release();
    expect((await first).status).toBe(200);
    expect((await post("/long/quick", "s-long")).status).toBe(200);
  }, 60_000);

  it("a queued job keeps the session's lock for the job's life, not for `lease`", async () => {
    origin.release();
    const spend = await post("/queued/a", "s-spend");
    expect(spend.headers.get("sluice-decision"), show(spend)).toBe("allow");
    const first = await post("/queued/a", "s-queued");
    expect(first.status, show(first)).toBe(202);
    const lock = await lockOf("s-queued");
    // past the 1 s lease of the grant (its fencing token is Redis's clock in µs then)
    await untilRedisPast(rig.redis, Math.floor(Number(lock?.fields.fence) / 1000) + 1_500);
    const next = await post("/queued/b", "s-queued");
    expect(next.status, `the session's next call must wait for its queued one: ${show(next)}`).toBe(409);
    expect(next.json()).toMatchObject({ title: "Session busy" });
    const location = first.headers.get("location") as string;
    const status = async () => {
      const r = await call(mf, location);
      return r.status === 200 ? (r.json().status as string) : undefined;
    };
    expect(await pollUntil(status, (s) => s === "delivered" || s === "failed", 40_000)).toBe("delivered");
    expect(reached("s-queued")).toBe(1);
  }, 60_000);
});

/**
 * An application behind a proxy that cuts the connection: `/cut` reads the request, drops the
 * socket at once, and works on until `finish()`; `/late-cut` drops it only after `LATE_CUT_MS`
 * (past the route's `origin_timeout`: no late answer ever comes); `/hold` answers at `finish()`.
 * `overlaps` counts requests that arrived while another was still running.
 */
interface CuttingOrigin {
  url: string;
  running: number;
  overlaps: number;
  /** Connections cut so far. */
  cut: number;
  finish(): void;
  close(): Promise<void>;
}

const LATE_CUT_MS = 1_500;

async function startCuttingOrigin(): Promise<CuttingOrigin> {
  const o = { running: 0, overlaps: 0, cut: 0 };
  const pending: Array<() => void> = [];
  const works = (answer?: () => void) => {
    o.running++;
    pending.push(() => {
      o.running--;
      answer?.();
    });
  };
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (o.running > 0) o.overlaps++;
      const url = req.url ?? "";
      if (url.includes("/cut") || url.includes("/late-cut")) {
        works();
        const cut = () => (o.cut++, req.socket.destroy());
        if (url.includes("/late-cut")) setTimeout(cut, LATE_CUT_MS);
        else cut();
        return;
      }
      if (url.includes("/hold"))
        return works(() => res.writeHead(200, { "content-type": "application/json" }).end("{}"));
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{}");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get running() {
      return o.running;
    },
    get overlaps() {
      return o.overlaps;
    },
    get cut() {
      return o.cut;
    },
    finish: () => pending.splice(0).forEach((f) => f()),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

describe("a session call whose outcome is unknown keeps its session's lock", () => {
  const CUT_PREFIX = "slu";
  const CUT: SluiceInput = {
    key_prefix: CUT_PREFIX,
    timeout_ms: 5_000,
    routes: [
      { name: "agent", match: "/agent/*", methods: ["POST"], session: session() },
      { name: "late", match: "/late/*", methods: ["POST"], origin_timeout: "1s", session: session() },
    ],
  };
  const cut = useStack({ sluice: CUT, origin: startCuttingOrigin });
  const send = (w: Miniflare, path: string, sessionId: string) =>
    call(w, path, {
      method: "POST",
      ip: "203.0.113.94",
      body: "{}",
      headers: { "content-type": "application/json", "x-session-id": sessionId },
    });

  it("a connection cut after the request was read: the session's next call is refused, never run beside it at the origin", async () => {
    const first = await send(cut.mf, "/agent/cut", "s-r5");
    expect(first.status, first.text).toBe(502);
    expect(cut.origin.running, "the first call still works at the origin").toBe(1);
    const next = await send(cut.mf, "/agent/next", "s-r5");
    cut.origin.finish();
    expect(
      cut.origin.overlaps,
      `the session's next call ran beside the first (answered ${next.status}); it must be refused (409) or wait`,
    ).toBe(0);
    expect(next.status, show(next)).toBe(409);
    expect(next.json()).toMatchObject({ title: "Session busy" });
  }, 30_000);

  it("a timeout whose late answer never comes: the lock is not released, it runs out its lease", async () => {
    const cutsBefore = cut.origin.cut;
    // other sessions' locks (a call cut before lets its own run out): this call's is one more
    const locksBefore = (await sessionLocks(cut.redis, CUT_PREFIX)).length;
    const first = await send(cut.mf, "/late/late-cut", "s-late");
    expect(first.status, first.text).toBe(504);
    await pollUntil(
      async () => cut.origin.cut,
      (n) => n > cutsBefore,
      10_000,
    );
    // the late answer is given up on once the connection is cut: before, the lock was released then
    const locks = await pollUntil(
      () => sessionLocks(cut.redis, CUT_PREFIX),
      (l) => l.length === locksBefore,
      3_000,
    );
    expect(locks.length, "the lock of a call whose outcome is unknown is kept").toBe(locksBefore + 1);
    const next = await send(cut.mf, "/late/next", "s-late");
    cut.origin.finish();
    expect(cut.origin.overlaps, `the session's next call ran beside the first (answered ${next.status})`).toBe(0);
    expect(next.status, show(next)).toBe(409);
  }, 30_000);

  it("a session lease shorter than the renewal loop can keep is refused at load, naming the field: no call runs under it", async () => {
    const before = cut.origin.overlaps;
    // renewals come every max(100 ms, lease / 3): a 50 ms lease would lapse between them mid-call
    const w = cut.worker({
      sluice: {
        key_prefix: CUT_PREFIX,
        routes: [{ name: "short", match: "/short/*", methods: ["POST"], session: session({ lease: "50ms" }) }],
      },
      bindings: { SLUICE_ADMIN_TOKEN: "r7-admin" },
    });
    // accepted, the call would be held at the origin: it is given 5 s to be refused
    const first = await Promise.race([send(w, "/short/hold", "s-r7"), sleep(5_000).then(() => undefined)]);
    expect(first?.status, first?.text ?? "the call went to the origin").toBe(500);
    if (!first) return;
    // a client is told only that the configuration is invalid; the operator, with the token, the field
    const told = await call(w, "/__sluice/health", { headers: { authorization: "Bearer r7-admin" } });
    expect(told.json()).toMatchObject({ field: "SLUICE.routes[0].session.lease" });
    expect(String(told.json().detail)).toMatch(/must be at least "1s"/);
    const next = await send(w, "/short/next", "s-r7");
    cut.origin.finish();
    expect(next.status).toBe(500);
    expect(cut.origin.running).toBe(0);
    expect(
      cut.origin.overlaps - before,
      `the session's next call ran beside the live first one (answered ${next.status} ${next.text.slice(0, 100)})`,
    ).toBe(0);
  }, 30_000);
});
