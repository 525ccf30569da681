/**
 * Issue 29, finding 3: a session's lock ended before its call did. It was released when the
 * response left (a 504 at `origin_timeout` while the origin still worked), nothing renewed it (a
 * call longer than `lease` was taken over), and a queued job held it only for `lease`: the
 * session's next call ran beside the first at the origin. Now the lock is renewed while the call
 * and its late-answer wait run, released once the outcome is known, and a queued job holds it for
 * the job's life.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, useStack } from "../integration/stack.js";
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
