import { describe, expect, it } from "vitest";
import { TOKEN, useStack } from "../../../test/integration/stack.js";
import type { Route } from "../../config/index.js";
import type { OriginReply } from "../../origin/forward.js";
import { StoreRegistry, type Store } from "../../store/redis.js";
import type { Renewal } from "../../util/renewal.js";
import { claim, takeUpJob, type JobClaim, type JobGuards } from "./core.js";
import { idempotencySettings } from "./idempotency/schema.js";
import { sessionSettings } from "./session/schema.js";

/*
 * A taken-up job's `JobClaim` stops its guards' renewals itself, at the point its writes need:
 * `settleWith` once its outcome writes have landed (the claim renewed while they are tried),
 * `park` before its writes (a renewal landing after them would undo the job's lease), `letLapse`
 * without writing anything. Against a real Redis; the store and the renewal loop are watched.
 */

const rig = useStack({ origin: false });

const ROUTE = "orders";
const route = {
  name: ROUTE,
  idempotency: idempotencySettings().parse({ lease: "1s", ttl: "1h" }),
  session: sessionSettings().parse({ key: "header:x-session", lease: "1s" }),
  queue: { max_age: 60_000, status_ttl: 60_000, retry_delays: [1_000] },
  origin_timeout: 1_000,
} as unknown as Route;

let run = 0;

/** A job queued as `enqueue` queues it, then taken up; `events` has the store's writes (as they land) and the renewals' stops, from the take-up on. */
async function takenUpJob(): Promise<{ jobClaim: JobClaim; events: string[] }> {
  const events: string[] = [];
  const real = new StoreRegistry().store({
    name: "job-claim",
    connection: { url: rig.stack.bridge.url, token: TOKEN },
    budget: 10_000,
  });
  const store = new Proxy(real, {
    get(target, p) {
      if (p === "run")
        return async (...a: Parameters<Store["run"]>) => {
          const reply = await target.run(...a);
          events.push(`write ${String(a[2][0])}`);
          return reply;
        };
      const v: unknown = Reflect.get(target, p, target);
      return typeof v === "function" ? (v as (...x: unknown[]) => unknown).bind(target) : v;
    },
  });
  const renewing = (): Renewal => ({ stop: () => void events.push("stop"), done: Promise.resolve() });
  const prefix = `jobclaim${++run}-${Date.now()}`;
  // the work after a response (none the checks wait for): kept, as a Worker's waitUntil would keep it
  const background: Array<Promise<unknown>> = [];
  const defer = (p: Promise<unknown>): void => void background.push(p);
  const subject = {
    route: ROUTE,
    key: { key: "k", fingerprint: "fp", principal: "caller", settings: route.idempotency! },
    session: { identity: "s", label: "s", principal: "caller", settings: route.session! },
  };
  const guarding = await claim(
    subject,
    { prefix, claimStore: store, outcomeStore: store, defer },
    {
      lifeMs: 60_000,
      queued: true,
    },
  );
  if (guarding.kind !== "held") throw new Error("a fresh key was not claimed");
  const { tickets, sluiceHeaders } = guarding.claim;
  const job: JobGuards = { id: `job-${run}`, route: ROUTE, ...tickets, sluiceHeaders };
  const place = {
    config: { key_prefix: prefix, ledger_length: 100 },
    stores: { fixed: () => store },
    defer,
    renewing,
  };
  const taken = await takeUpJob(job, route, place);
  if (taken.kind !== "held") throw new Error(`the job's guards were refused: ${taken.why}`);
  events.length = 0;
  return { jobClaim: taken.claim, events };
}

function answered(status: number): OriginReply {
  return { response: new Response("done", { status }), outcome: "answered", sent: new Headers() };
}

describe("a taken-up job's JobClaim", () => {
  it("settleWith stops the renewals once the claim is completed and the lock released", async () => {
    const { jobClaim, events } = await takenUpJob();
    await jobClaim.settleWith(answered(201));
    expect(events.filter((e) => e.startsWith("write"))).toEqual(
      expect.arrayContaining(["write complete", "write release"]),
    );
    const firstStop = events.indexOf("stop");
    expect(firstStop).toBeGreaterThan(events.lastIndexOf("write complete"));
    expect(firstStop).toBeGreaterThan(events.lastIndexOf("write release"));
    expect(events.slice(firstStop)).toEqual(["stop", "stop"]);
  });

  it("park stops the renewals before it parks the claim and the lock", async () => {
    const { jobClaim, events } = await takenUpJob();
    expect(await jobClaim.park()).toBe(true);
    expect(events).toEqual(["stop", "stop", "write park", "write park"]);
  });

  it("letLapse stops the renewals and writes nothing", async () => {
    const { jobClaim, events } = await takenUpJob();
    await jobClaim.letLapse();
    expect(events).toEqual(["stop", "stop"]);
  });
});
