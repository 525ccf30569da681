/**
 * Finding 8 of issue 29: a tier lookup read inherited names. With `tier = "header:x-plan"`, a
 * client sending `x-plan: constructor` (or `__proto__`, `toString`) was looked up in the plain
 * object of `rates` and found Object's own members: a `500` under `on_store_error = "local"`,
 * no limit at all under `open`. Now only a configured tier counts (own members only): any other
 * name is the limit's own rate, as an unknown plan always was.
 */
import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, useStack } from "../integration/stack.js";

const INHERITED = ["constructor", "__proto__", "toString", "hasOwnProperty", "valueOf", "__defineGetter__"];

const limit = { name: "per-key", key: "header:x-api-key", tier: "header:x-plan", rates: { gold: "5/1h" } };
const SLUICE = (onStoreError: "local" | "open"): SluiceInput => ({
  key_prefix: `tp-${onStoreError}`,
  timeout_ms: 1_000,
  on_store_error: onStoreError,
  routes: [{ name: "api", match: "/api/*", limits: [{ ...limit, rate: 2, period: "1h" }] }],
});

/** Requests of one client until the first that is not a 200 (at most 8): how many got through, and that status. */
async function admitted(mf: Parameters<typeof call>[0], key: string, plan: string) {
  const headers = { "x-api-key": key, "x-plan": plan };
  let n = 0;
  let status = 200;
  while (n < 8 && (status = (await call(mf, "/api/x", { headers })).status) === 200) n++;
  return { n, status };
}

for (const mode of ["local", "open"] as const) {
  describe(`on_store_error = "${mode}"`, () => {
    const rig = useStack({ sluice: SLUICE(mode) });

    it("a configured tier still takes its rate, an unknown one the limit's own", async () => {
      expect(await admitted(rig.mf, "k-gold", "gold")).toEqual({ n: 5, status: 429 });
      expect(await admitted(rig.mf, "k-none", "platinum")).toEqual({ n: 2, status: 429 });
    });

    it("a tier named after an inherited member is no tier: the limit's own rate, never a 500 or no limit", async () => {
      for (const plan of INHERITED) {
        expect({ plan, ...(await admitted(rig.mf, `k-${plan}`, plan)) }).toEqual({ plan, n: 2, status: 429 });
      }
    });
  });
}
