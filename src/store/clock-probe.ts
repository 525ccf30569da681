import type { ClockReport } from "./clock.js";
import type { Store } from "./redis.js";

/**
 * A database's clock (clock.ts): as this isolate learnt it from its scripts, or, before any has
 * run, from one call of lua/clock.lua (`probeSource`, with the deployment's version key as its
 * key), which learns it the same way. Throws as `Store.run` does.
 *
 * @example const clock = await storeClock(store, clockLua, versionKey(config.key_prefix)); // { mode: "isolate", ... }
 */
export async function storeClock(store: Store, probeSource: string, key: string): Promise<ClockReport> {
  if (store.clock().mode === "unknown") await store.run(store.script(probeSource), [key], []);
  return store.clock();
}
