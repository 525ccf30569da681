import type { RouteSettings, SluiceSettings } from "./schema.js";
import { ConfigError, fieldError, type ConfigSource, type ConfigVars } from "./load.js";
import { usesJwt } from "./uses-jwt.js";

/**
 * What the gateway's configuration asks of its Worker (`loadConfig`, ./index.ts): `ORIGIN_URL`
 * parsed, `SLUICE` as JSON text or an object, a queue binding for a queue route, a key to verify
 * JWTs with, idempotency kept through the call to the origin. A middleware's options
 * (`OPTIONS_SOURCE` in ./load.ts) have no origin, no bindings and no JSON text, so an app using
 * `rateLimit()` alone carries none of these checks.
 */
export const WORKER_SOURCE: ConfigSource = {
  origin: (vars) => (vars.originOptional && vars.ORIGIN_URL === undefined ? undefined : parseOrigin(vars.ORIGIN_URL)),
  settings: (vars) => (typeof vars.SLUICE === "string" ? parseJson(vars.SLUICE) : (vars.SLUICE ?? {})),
  check(s, vars, written, originUrl) {
    checkWorker(s, vars, written);
    if (originUrl) s.routes.forEach((r, ri) => checkKeptThroughCall(r, ri, written));
  },
};

/** What the settings need of the Worker: a queue binding for a queue route, a key to verify JWTs with. */
function checkWorker(s: SluiceSettings, vars: ConfigVars, written: unknown): void {
  const queued = s.routes.findIndex((r) => r.on_limit === "queue");
  if (queued >= 0 && vars.hasQueue === false) {
    throw fieldError(
      ["SLUICE", "routes", queued, "on_limit"],
      'is "queue" but the Worker has no SLUICE_QUEUE producer binding ([[queues.producers]] binding = "SLUICE_QUEUE" in wrangler.toml)',
      written,
    );
  }
  const jwtRoute = s.routes.findIndex(usesJwt);
  const secretEnv = s.jwt?.secret_env ?? "SLUICE_JWT_SECRET";
  if (jwtRoute >= 0 && !s.jwt?.jwks_url && vars.hasSecret && !vars.hasSecret(secretEnv)) {
    throw fieldError(
      ["SLUICE", "routes", jwtRoute],
      `keys limits, sessions or idempotency on JWT claims but there is no ${secretEnv} secret (or SLUICE.jwt.jwks_url) to verify tokens with`,
      written,
    );
  }
}

/**
 * An idempotency key's `ttl` (its `derive.window` for keys derived from fields) is how long its
 * answer is kept from when it comes; the claim itself is held as long as the call runs, whatever
 * the ttl. A ttl shorter than the call it guards (`origin_timeout`, which the client waits for)
 * would read as "a duplicate that long after the first is a new request", which is not what
 * happens: refused. The wait for a late answer after the 504 does not count (it is fixed, 25 s,
 * and the claim is held through it): only a route with an origin has a call to measure.
 */
function checkKeptThroughCall(r: RouteSettings, ri: number, written: unknown): void {
  const i = r.idempotency;
  if (!i || i.ttl >= r.origin_timeout) return;
  const derived = typeof i.derive === "object";
  throw fieldError(
    ["SLUICE", "routes", ri, "idempotency", ...(derived ? ["derive", "window"] : ["ttl"])],
    `must be at least the route's origin_timeout (${i.ttl} ms < ${r.origin_timeout} ms): it is kept from the answer, and a call may run origin_timeout before it answers, so a shorter one cannot mean "a duplicate this long after the first is new"; raise it or lower origin_timeout`,
    written,
  );
}

function parseOrigin(value: unknown): URL {
  if (typeof value !== "string" || value === "")
    throw new ConfigError("ORIGIN_URL", "is required: the URL allowed requests are forwarded to");
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError("ORIGIN_URL", `"${value}" is not a URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new ConfigError("ORIGIN_URL", "must be an http or https URL");
  return url;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ConfigError("SLUICE", `is a string but not valid JSON (${(e as Error).message})`);
  }
}
