import { describe, expect, it } from "vitest";
import { loadConfig, type Limit } from "../../../config/index.js";
import { scriptCall } from "./decision.js";
import { DECIDE_LIMIT_COLUMNS } from "./limit-columns.js";
import { floorOf, priorityOf } from "./priority.js";
import { leasableShape, refusalCacheable } from "../algorithms/registry.js";
import type { RequestFacts } from "../../../identity/identify.js";

/* Priorities (docs/algorithms.md, Priorities): the request's priority, the floor a reserve puts under it, the configuration's checks. */

const facts = (headers: Record<string, string> = {}, claims?: Record<string, unknown>): RequestFacts => ({
  ip: "192.0.2.1",
  matchPath: "/",
  headers: new Headers(headers),
  url: new URL("https://s.example/"),
  ...(claims ? { claims } : {}),
});

function load(limit: Record<string, unknown>, route: Record<string, unknown> = {}) {
  return loadConfig({
    ORIGIN_URL: "https://o.example",
    SLUICE: {
      routes: [{ name: "r", match: "/", ...route, limits: [{ name: "l", rate: 10, period: "1s", ...limit }] }],
    },
  });
}

describe("priorities", () => {
  it("reads the route's name, or a header's or claim's value; anything else is default", () => {
    expect(priorityOf("critical", facts())).toBe("critical");
    expect(priorityOf("header:x-p", facts({ "x-p": " Sheddable " }))).toBe("sheddable");
    expect(priorityOf("header:x-p", facts({ "x-p": "vip" }))).toBe("default");
    expect(priorityOf("header:x-p", facts())).toBe("default");
    expect(priorityOf("jwt:tier", facts({}, { tier: "critical" }))).toBe("critical");
    expect(priorityOf("jwt:tier", facts({}, { tier: 3 }))).toBe("default");
  });

  it("floor(P) = ceil(capacity × the reserve of the priorities above P), on burst or rate by algorithm", () => {
    const reserve = { critical: 0.2, default: 0.1 };
    const bucket = { algorithm: "token_bucket", rate: 100, burst: 10, reserve } as const;
    expect([floorOf(bucket, "critical"), floorOf(bucket, "default"), floorOf(bucket, "sheddable")]).toEqual([0, 2, 3]);
    const window = { algorithm: "sliding_window", rate: 7, burst: 7, reserve } as const;
    // 7 × 0.2 = 1.4 → 2; 7 × 0.3 = 2.1 → 3 (and 10 × 0.3 stays 3, not 4)
    expect([floorOf(window, "default"), floorOf(window, "sheddable")]).toEqual([2, 3]);
    expect(floorOf({ ...window, rate: 10 }, "sheddable")).toBe(3);
    expect(floorOf({ algorithm: "fixed_window", rate: 10, burst: 10 }, "sheddable")).toBe(0);
  });

  it("checks reserve and priority with field-named errors", () => {
    const bad = (limit: Record<string, unknown>, route: Record<string, unknown> = {}) => {
      const r = load(limit, route);
      return r.ok ? undefined : r.error.field;
    };
    expect(bad({ reserve: { sheddable: 0.1 } })).toBe("SLUICE.routes[0].limits[0].reserve.sheddable");
    expect(bad({ reserve: { urgent: 0.1 } })).toBe("SLUICE.routes[0].limits[0].reserve.urgent");
    expect(bad({ reserve: { critical: 1 } })).toBe("SLUICE.routes[0].limits[0].reserve.critical");
    expect(bad({ reserve: { critical: 0 } })).toBe("SLUICE.routes[0].limits[0].reserve.critical");
    expect(bad({ reserve: { critical: 0.5, default: 0.5 } })).toBe("SLUICE.routes[0].limits[0].reserve");
    expect(bad({ reserve: { critical: 0.2 }, lease: true })).toBe("SLUICE.routes[0].limits[0].lease");
    expect(bad({}, { priority: "urgent" })).toBe("SLUICE.routes[0].priority");
    expect(bad({}, { priority: "ip" })).toBe("SLUICE.routes[0].priority");
    expect(bad({ reserve: { critical: 0.2, default: 0.1 } }, { priority: "header:x-priority" })).toBeUndefined();
  });

  it("a limit with a reserve is neither leased nor cached; the route defaults to default", () => {
    const r = load({ reserve: { critical: 0.2 } });
    if (!r.ok) throw r.error;
    const route = r.config.routes[0]!;
    const l = route.limits[0] as Limit;
    expect(route.priority).toBe("default");
    expect(l.lease).toBe(false);
    expect(leasableShape(l)).toBe(false);
    expect(refusalCacheable(l)).toBe(false);
  });

  it("sends the floor in the limit's `floor` ARGV column, in terms of the capacity sent", () => {
    const r = load({ rate: 20, burst: 20, reserve: { critical: 0.25 } });
    if (!r.ok) throw r.error;
    const limit = r.config.routes[0]!.limits[0] as Limit;
    const params = { rate: 20, period: 1000, burst: 20, cost: 1, floor: 5 };
    // one value per column; the floor's found by its name
    const floor = 3 + DECIDE_LIMIT_COLUMNS.indexOf("floor");
    expect(scriptCall([{ limit, key: "k", params }], "take").args.slice(3)).toHaveLength(DECIDE_LIMIT_COLUMNS.length);
    expect(scriptCall([{ limit, key: "k", params }], "take").args[floor]).toBe("5");
    // a split limit's starting share of 10 out of 20: 5 of 20 is 3 (rounded up) of 10
    const split = { shareKey: "s", demandKey: "d", start: { rate: 10, burst: 10 } };
    expect(scriptCall([{ limit, key: "k", params, split }], "take").args[floor]).toBe("3");
  });
});
