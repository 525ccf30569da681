import type { Context } from "hono";
import { ownResult, publish, type Scope, type SluiceEnv, type Step } from "../../../context.js";
import type { SwitchInForce } from "./vars.js";
import { shedWithoutOrigin } from "../../shedding/step.js";
import { failover } from "../../shedding/failover.js";
import { listsOf } from "../lists.js";

/**
 * The route's degrade switch, set by an operator (`PUT /__sluice/routes/{name}/mode`) and read
 * with the access lists (no Redis call of its own). `open` lets every request past the route's
 * limits (the deny list has already run; the JWT, idempotency and sessions still apply). `divert`
 * skips the limits too and goes on to the guards: the divert origin is asked after them
 * ({@link modeDivertStep}), so a duplicate is replayed or refused as on any day and a first arrival
 * is diverted holding its claim and session. `fallback` and `reject` answer every request of the
 * route before its limits are asked: nothing reaches any origin, so nothing needs guarding. Only
 * in the gateway's and `sluice()`'s pipeline: the standalone middlewares know no switch.
 */
export const routeModeStep: Step = async (c, scope, next) => {
  const route = scope.route;
  if (!route) return next();
  const source = { prefix: scope.config.key_prefix, store: scope.stores.home() };
  const forced = await listsOf(scope.runtime).modeOf(source, route.name, scope.defer);
  if (!forced) return next();
  if (scope.meta) scope.meta.limit = `mode:${forced.mode}`;
  if (forced.mode === "open" || (forced.mode === "divert" && route.divertUrl)) {
    // not allowListed: that also spares the JWT's verification, which idempotency and sessions may key on
    publish(c, scope, "sluiceSwitch", { mode: forced.mode, until: forced.until });
    return next();
  }
  return answerSwitched(c, scope, forced);
};

/**
 * The `divert` switch, after idempotency and sessions: the request goes to the route's divert
 * origin in place of its origin. One that holds a claim or a session lock (the guards told it a
 * fencing token) is sent as failover sends it, with its fencing token, key and session, and the
 * divert origin's answer, whatever it is, is the client's and what its claim settles with
 * (duplicates replay it). One that holds neither gets the divert origin's answer when it gave one
 * worth relaying, else the fallback or the 503, as before.
 */
export const modeDivertStep: Step = async (c, scope, next) => {
  const route = scope.route;
  const forced = ownResult(c, scope, "sluiceSwitch");
  if (!route || forced?.mode !== "divert") return next();
  const guards = ownResult(c, scope, "sluiceGuards");
  if (guards?.sluiceHeaders["sluice-fencing-token"] !== undefined) return failover(scope, c.req.raw, "mode", guards);
  return answerSwitched(c, scope, forced);
};

/**
 * A request of a route switched to `fallback`, `reject` or `divert`, answered by the shedder as
 * that shedding answers a refusal, but with no refusal to report (no limit refused it, so no
 * `RateLimit` headers): the divert origin's answer (`divert`), else the last good copy or the
 * static fallback page (`fallback`, and `divert` when the divert origin gave nothing), else the 503
 * problem.
 */
function answerSwitched(c: Context<SluiceEnv>, scope: Scope, switched: SwitchInForce): Promise<Response> {
  return shedWithoutOrigin(c, scope, { kind: "switch", switched });
}
