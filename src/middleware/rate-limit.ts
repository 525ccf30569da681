/**
 * `sluice/rate-limit`: the rate limits alone, for an app that needs nothing else of sluice.
 *
 * @example
 * import { rateLimit } from "sluice/rate-limit";
 * app.use("/api/*", rateLimit({ limits: [{ name: "per-ip", key: "ip", rate: 10, period: "1s", burst: 20 }] }));
 */
import type { MiddlewareHandler } from "hono";
import type { SluiceInput } from "../config/schema.js";
import { ConfigError } from "../config/load.js";
import { plainConfigSchema } from "../config/settings.js";
import type { SluiceEnv, Step } from "../context.js";
import { usesJwt } from "../config/uses-jwt.js";
import { banOnRefusal } from "../features/access/bans.js";
import { rateLimitStep, reject } from "../features/rate-limit/step.js";
import { Problem } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";
import type { Literal } from "./literal-options.js";
import { compileOptions, standalone, type SharedOptions } from "./standalone.js";

export type { SluiceDecision, SluiceEnv, SluiceVariables, LimitState } from "../context.js";
export type { SharedOptions } from "./standalone.js";
// what the middleware publishes as `c.get("sluiceLimits")`: exported, its declaration comes with it
export type { DecidedLimit, LimitSummary } from "../features/rate-limit/vars.js";

type RouteInput = NonNullable<SluiceInput["routes"]>[number];
/**
 * A limit, exactly as in `wrangler.toml`'s `[[vars.SLUICE.routes.limits]]`. An interface (rather
 * than the `Literal<...>` it extends) so that a compiler error names it `LimitOptions` instead of
 * printing its twenty fields.
 */
export interface LimitOptions extends Literal<NonNullable<RouteInput["limits"]>[number]> {
  /** The limit's name: in its buckets' keys, the `RateLimit` headers, a refusal's problem and the metrics. */
  name: string;
}

/**
 * The limits as written, typed as options: an identity function, so that a `limits` array kept in
 * a `const` of its own stays literal (`period: "1s"` a duration, `key: "ip"` a key part) and a typo
 * is a compiler error at the array. A bare `const limits = [{ ..., period: "1s" }]` widens `"1s"`
 * to `string`, which no option accepts. `[...] satisfies LimitOptions[]` does the same without a call.
 *
 * @example
 * const limits = defineLimits([{ name: "per-ip", key: "ip", rate: 10, period: "1s", burst: 20 }]);
 * app.use("/api/*", rateLimit({ name: "api", limits }));
 */
export function defineLimits(limits: LimitOptions[]): LimitOptions[] {
  return limits;
}

export interface RateLimitOptions extends SharedOptions {
  limits: readonly LimitOptions[];
  /** Names the buckets in Redis (`{key_prefix}:{name}:{limit}:{hash}`) and the metrics; default "app". */
  name?: string;
  /** Decide and count, never refuse (how a new limit is rolled out). */
  shadow?: boolean;
  /** Report the buckets without spending (a quota endpoint). */
  peek?: boolean;
  /** The requests' priority: a name, or `header:<name>` / `jwt:<claim>` holding one (docs/algorithms.md, Priorities). */
  priority?: RouteInput["priority"];
  /** An in-flight limit for the handlers after it that follows their latency (docs/algorithms.md, Adaptive limit). */
  adaptive?: RouteInput["adaptive"];
}

/**
 * Rate limits for the routes it is mounted on: every limit decided in one Redis call, all or
 * nothing; a refusal is a 429 problem with `Retry-After` and `RateLimit` headers; the handler
 * finds the decision in `c.get("sluice")`.
 */
export function rateLimit(options: RateLimitOptions): MiddlewareHandler<SluiceEnv> {
  const { limits, name = "app", shadow, peek, priority, adaptive } = options;
  // a route may have no limits (idempotency alone), but rateLimit() with neither limits nor adaptive guards nothing
  if (Array.isArray(limits) && limits.length === 0 && adaptive === undefined)
    throw new ConfigError("rateLimit(): limits", "must hold at least one limit (or set adaptive)");
  const route = { name, limits, shadow, peek, priority, adaptive };
  const config = compileOptions("rateLimit", options, route, { schema: plainConfigSchema });
  const compiled = config.routes[0];
  // no on_limit here: a refusal is a 429, and none of the shedding strategies is bundled
  const step = rateLimitStep(reject, banOnRefusal);
  const steps = compiled && usesJwt(compiled) ? [claimsVerifiedBefore, step] : [step];
  return standalone(config, options, steps, { by: "rateLimit()", duties: ["limits"] });
}

/**
 * Limits keyed on JWT claims read the claims a verifier put on the context before `rateLimit()`:
 * `verifyJwt()` (`sluice/access`) or hono's `jwt()`. rateLimit() verifies no token itself, so that
 * a Worker whose limits read no claims carries no JWT code. A request with an `Authorization`
 * header but no verified claims met no verifier (one refuses a token that does not verify): the
 * app is composed wrongly, and the request is a 500 rather than keyed as though it carried no token.
 * Without the header there are no claims, and the limits' `missing` policy applies, as after a verifier.
 */
const claimsVerifiedBefore: Step = async (c, scope, next) => {
  if (!scope.facts.claims && c.req.header("authorization") !== undefined)
    throw new Problem({
      type: PROBLEMS.invalidConfiguration,
      detail: "rateLimit()'s limits key on JWT claims, and no verifyJwt() (sluice/access) or jwt() ran before it",
    });
  await next();
};
