/**
 * A queue route's bounds and retry schedule in the configuration: durations parsed once, the
 * schedule's default kept from before `retry_delays` existed, and every error naming its field.
 */
import { describe, expect, it } from "vitest";
import { loadConfig, type Route } from "../../../config/index.js";

const ORIGIN_URL = "https://api.example.com";

const load = (queue: Record<string, unknown>) =>
  loadConfig({
    ORIGIN_URL,
    SLUICE: { routes: [{ name: "sms", match: "/sms", on_limit: "queue", queue, limits: [] }] },
  });

function routeOf(queue: Record<string, unknown>): Route {
  const r = load(queue);
  if (!r.ok) throw r.error;
  return r.config.routes[0] as Route;
}

function errorOf(queue: Record<string, unknown>): { field: string; problem: string } {
  const r = load(queue);
  if (r.ok) throw new Error("expected an invalid configuration");
  return { field: r.error.field, problem: r.error.problem };
}

describe("queue bounds and retry schedule in the configuration", () => {
  it("parses retry_delays to milliseconds; its entries are the retries", () => {
    const q = routeOf({ retry_delays: ["1s", "5s", "30s", "5m", "30m"] }).queue;
    expect(q.retry_delays).toEqual([1_000, 5_000, 30_000, 300_000, 1_800_000]);
    expect(q.max_retries).toBe(5);
  });

  it("keeps the schedule of before without retry_delays: max_retries (3) doubling from 1 s, at most 60 s", () => {
    expect(routeOf({}).queue).toMatchObject({ max_retries: 3, retry_delays: [1_000, 2_000, 4_000] });
    expect(routeOf({ max_retries: 8 }).queue.retry_delays).toEqual([
      1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000,
    ]);
    expect(routeOf({ max_retries: 0 }).queue.retry_delays).toEqual([]);
    expect(routeOf({ max_retries: 2, retry_delays: ["1s", "2s"] }).queue.max_retries).toBe(2);
  });

  it("normalises the callback allowlist: exact URLs and prefixes with a trailing *", () => {
    expect(
      routeOf({ callbacks: ["https://HOOKS.example.com/jobs/*", "https://hooks.example.com"] }).queue.callbacks,
    ).toEqual([
      { url: "https://hooks.example.com/jobs/", prefix: true },
      { url: "https://hooks.example.com/", prefix: false },
    ]);
    expect(routeOf({}).queue.callbacks).toEqual([]);
  });

  it("parses max_depth and max_age, and leaves both unbounded by default", () => {
    expect(routeOf({ max_depth: 10_000, max_age: "10m" }).queue).toMatchObject({ max_depth: 10_000, max_age: 600_000 });
    const q = routeOf({}).queue;
    expect(q.max_depth).toBeUndefined();
    expect(q.max_age).toBeUndefined();
  });

  it("gives each client a tenth of max_depth by default (at least one), or the max_per_client it is given", () => {
    expect(routeOf({ max_depth: 10 }).queue.max_per_client).toBe(1);
    expect(routeOf({ max_depth: 3 }).queue.max_per_client).toBe(1);
    expect(routeOf({ max_depth: 101 }).queue.max_per_client).toBe(11);
    expect(routeOf({ max_depth: 100_000 }).queue.max_per_client).toBe(10_000);
    expect(routeOf({ max_depth: 10, max_per_client: 10 }).queue.max_per_client).toBe(10);
    // a share without a bound on the queue: each client is bounded, the queue is not
    expect(routeOf({ max_per_client: 5 }).queue).toMatchObject({ max_per_client: 5 });
    expect(routeOf({}).queue.max_per_client).toBeUndefined();
  });

  it.each([
    [
      "a client's share larger than the queue",
      { max_depth: 10, max_per_client: 11 },
      "routes[0].queue.max_per_client",
      /more than max_depth/,
    ],
    ["max_per_client 0", { max_per_client: 0 }, "routes[0].queue.max_per_client", /too small|>=1/],
    ["max_depth 0", { max_depth: 0 }, "routes[0].queue.max_depth", /too small|>=1/],
    ["a fractional max_depth", { max_depth: 2.5 }, "routes[0].queue.max_depth", /integer|int/],
    ["max_age under a second", { max_age: "500ms" }, "routes[0].queue.max_age", /at least 1s/],
    ["max_age not a duration", { max_age: "soon" }, "routes[0].queue.max_age", /not a duration/],
    ["a retry delay past 12 h", { retry_delays: ["1s", "13h"] }, "routes[0].queue.retry_delays[1]", /at most 12h/],
    ["a retry delay not a duration", { retry_delays: ["1s", 5] }, "routes[0].queue.retry_delays[1]", /string/],
    [
      "retry_delays disagreeing with max_retries",
      { max_retries: 3, retry_delays: ["1s"] },
      "routes[0].queue.retry_delays",
      /has 1 entries but max_retries is 3/,
    ],
    ["a callback over http", { callbacks: ["http://hooks.example.com/*"] }, "routes[0].queue.callbacks[0]", /https/],
    [
      "a wildcard in a callback's host",
      { callbacks: ["https://*.example.com/"] },
      "routes[0].queue.callbacks[0]",
      /https/,
    ],
    ["an unknown queue option", { max_lenght: 3 }, "routes[0].queue", /max_lenght/],
  ])("refuses %s, naming the field", (_, queue, field, problem) => {
    const e = errorOf(queue);
    expect(e.field).toContain(field);
    expect(e.problem).toMatch(problem);
  });
});
