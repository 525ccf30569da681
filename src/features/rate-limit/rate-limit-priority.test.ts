import { afterEach, describe, expect, it } from "vitest";
import { countedApp, from, middlewareRig } from "../../../test/support/middleware-rig.js";
import { rateLimit, type RateLimitOptions } from "../../index.js";

/*
 * rateLimit() with a limit that reserves capacity for higher priorities (docs/algorithms.md, Priorities), the
 * priority read from a header, in Node against a real Redis, and by the isolate alone when Redis
 * is down under on_store_error = "local": the same floors either way.
 */
const rig = middlewareRig("prio");
const { db } = rig;
afterEach(() => db.stack.bridge.setMode("normal"));

// 10 per hour, 2 kept for critical, 2 more for default: sheddable may take 6, default 8, critical 10
const LIMITS: RateLimitOptions["limits"] = [
  { name: "api", key: "global", rate: 10, period: "1h", burst: 10, reserve: { critical: 0.2, default: 0.2 } },
];
const as = (priority: string) => from("198.51.100.30", { "x-priority": priority });

function appWith(extra: Partial<RateLimitOptions> = {}) {
  return countedApp(
    rateLimit(rig.options({ limits: LIMITS, priority: "header:x-priority", on_store_error: "local", ...extra })),
    (c) => c.text("ok"),
  );
}

async function statuses(app: ReturnType<typeof appWith>["app"], priority: string, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push((await app.request("/", as(priority))).status);
  return out;
}

describe("rateLimit() with reserve and priority", () => {
  for (const mode of ["redis", "local"] as const) {
    it(`${mode}: sheddable stops at its floor, default at its own, critical takes the rest`, async () => {
      const { app } = appWith();
      if (mode === "local") db.stack.bridge.setMode("refuse");
      expect(await statuses(app, "sheddable", 7)).toEqual([200, 200, 200, 200, 200, 200, 429]);
      // the refusal is honest: nothing left for sheddable (the 4 left are reserved), a retry-after
      // for when 4 + 1 are (one token per 6 minutes), full again in 6 × 6 minutes
      const refused = await app.request("/", as("sheddable"));
      expect(refused.status).toBe(429);
      expect(refused.headers.get("RateLimit")).toBe('"api";r=0;t=2160');
      expect(refused.headers.get("Retry-After")).toBe("360");
      // below the default reserve's top: default passes, sheddable does not
      expect(await statuses(app, "default", 3)).toEqual([200, 200, 429]);
      // a value that is not a priority is default; a missing header too
      expect((await app.request("/", as("urgent"))).status).toBe(429);
      expect((await app.request("/", from("198.51.100.30"))).status).toBe(429);
      expect(await statuses(app, "critical", 3)).toEqual([200, 200, 429]);
    });
  }

  it("a route's own priority applies to every request", async () => {
    const { app } = appWith({ priority: "critical" });
    expect(await statuses(app, "sheddable", 11)).toEqual([...Array<number>(10).fill(200), 429]);
  });

  it("a priority from the app's code: critical takes the reserve, an unknown name is default", async () => {
    // the app's code reads the header itself here; any state on the context would do
    const { app } = appWith({ priority: (c) => c.req.header("x-priority") });
    expect(await statuses(app, "sheddable", 7)).toEqual([200, 200, 200, 200, 200, 200, 429]);
    expect(await statuses(app, "urgent", 3)).toEqual([200, 200, 429]);
    expect(await statuses(app, "critical", 3)).toEqual([200, 200, 429]);
  });

  it("reserving for sheddable is a field-named error", () => {
    expect(() => rateLimit(rig.options({ limits: [{ ...LIMITS[0]!, reserve: { sheddable: 0.1 } }] }))).toThrow(
      /limits\[0\] \("api"\)\.reserve\.sheddable/,
    );
    expect(() =>
      rateLimit(rig.options({ limits: [{ ...LIMITS[0]!, reserve: { critical: 0.6, default: 0.5 } }] })),
    ).toThrow(/reserve/);
  });
});
