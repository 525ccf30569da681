/**
 * The degrade switch's result, as its step (./step.ts) publishes it on Hono's context: typed on
 * every context (`c.get("sluiceSwitch")`), as hono's own middleware type theirs.
 */
import type { ForcedMode } from "./store.js";

/**
 * The operator's switch in force for the route, when it lets the request on (`open`; `divert`,
 * done after the guards): either way the route's limits are not asked, nor its breaker (`divert`).
 */
export interface SwitchInForce {
  readonly mode: ForcedMode;
  /** Until when (epoch ms). */
  readonly until: number;
}

declare module "hono" {
  interface ContextVariableMap {
    /** The degrade switch in force for the request's route, when it let the request on. */
    sluiceSwitch: SwitchInForce | undefined;
  }
}
