import type { Context, MiddlewareHandler } from "hono";
import { getCookie, setCookie } from "hono/cookie";
import { sha256 } from "hono/utils/crypto";
import { clientIp } from "../keys/identify.js";
import { Problem, type ProblemInit } from "../problem.js";
import { issueSession, sessionValid, tokenMatches } from "./auth.js";
import type { AdminEnv } from "./context.js";
import { beginAuthAttempt, throttled, type AuthThrottle } from "./throttle.js";

/** The dashboard's session cookie. */
const SESSION = "sluice_admin";
/** Where the session cookie is sent: the admin API only. */
const SESSION_PATH = "/__sluice";
const HEALTH = "/__sluice/health";
/** The dashboard page (a login form until signed in) and the login form's target check for themselves. */
const OPEN = new Set(["/__sluice", "/__sluice/", "/__sluice/login"]);

const API_OFF: ProblemInit = {
  status: 404,
  title: "Not found",
  detail: "the admin API is off: no SLUICE_ADMIN_TOKEN is set",
};
const UNAUTHORISED: ProblemInit = {
  status: 401,
  title: "Unauthorized",
  detail: "the admin API needs Authorization: Bearer <SLUICE_ADMIN_TOKEN>",
  headers: { "WWW-Authenticate": 'Bearer realm="sluice"' },
};

/**
 * The one door of the admin API. `health` answers anybody that sluice is up (no Redis call), and
 * says more to the operator; the dashboard page and the login form are open; everything else
 * needs `Authorization: Bearer <SLUICE_ADMIN_TOKEN>` (compared in constant time, failures
 * throttled per client) or the dashboard's session. Without a configured token the whole API is
 * off (404). Sets `authorised` for the handlers.
 */
export function guard(throttle: AuthThrottle): MiddlewareHandler<AdminEnv> {
  return async (c, next) => {
    const token = c.env.SLUICE_ADMIN_TOKEN;
    const health = c.req.path === HEALTH;
    if (health && (!token || !presentsCredential(c))) return next();
    if (!token) throw new Problem(API_OFF);
    if (OPEN.has(c.req.path)) return next();
    const authorised = await authenticate(c, token, throttle);
    c.set("authorised", authorised);
    // a wrong credential on health still gets the public answer, as no credential does
    if (!authorised && !health) throw new Problem(UNAUTHORISED);
    return next();
  };
}

/** The bearer token (throttled), else the session cookie (not throttled: see `throttledCompare`). */
async function authenticate(c: Context<AdminEnv>, token: string, throttle: AuthThrottle): Promise<boolean> {
  const bearer = c.req.header("authorization");
  if (bearer) return throttledCompare(c, throttle, () => tokenMatches(bearer, token));
  // the cookie rides along on any request from a browser, cross-site forms included: changes
  // made with it must have a JSON body, which no cross-site form can send
  if (c.req.method !== "GET" && !(c.req.header("content-type") ?? "").startsWith("application/json")) {
    throw new Problem({ status: 415, title: "JSON required", detail: "changes take a JSON body" });
  }
  return signedIn(c, token);
}

/**
 * Compares a presented token under the failure throttle: a client over the limit gets the 429
 * before anything is compared; a success never counts. Dashboard session cookies are not
 * throttled: they are HMAC-signed (nothing to guess), and an expired one must not lock its
 * operator out.
 */
export async function throttledCompare(
  c: Context<AdminEnv>,
  throttle: AuthThrottle,
  compare: () => Promise<boolean>,
): Promise<boolean> {
  const config = c.get("config");
  const attempt = await beginAuthAttempt(
    throttle,
    c.get("stores").offPath(),
    config.key_prefix,
    clientIp(c.req.raw.headers),
  );
  if (attempt.retryAfterMs > 0) throw throttled(attempt.retryAfterMs);
  const matches = await compare();
  await attempt.settle(matches);
  return matches;
}

/** Whether the request carries a valid dashboard session for this token. */
export function signedIn(c: Context<AdminEnv>, token: string): Promise<boolean> {
  return sessionValid(getCookie(c, SESSION), token);
}

/** Gives the browser a fresh session cookie: HttpOnly, SameSite=Strict, Secure over https. */
export async function startSession(c: Context<AdminEnv>, token: string): Promise<void> {
  const session = await issueSession(token);
  const secure = new URL(c.req.url).protocol === "https:";
  setCookie(c, SESSION, session.value, {
    path: SESSION_PATH,
    httpOnly: true,
    sameSite: "Strict",
    maxAge: session.maxAgeS,
    secure,
  });
}

/**
 * Who made an admin request, as the ledger records it: `token` for the bearer token, else
 * `session:` and the first 12 hex digits of the SHA-256 of the session cookie (one per sign-in,
 * the same for all of that session's requests, and no way back to the cookie).
 */
export async function adminActor(c: Context<AdminEnv>): Promise<string> {
  if (c.req.header("authorization")) return "token";
  const session = getCookie(c, SESSION);
  return session ? `session:${((await sha256(session)) ?? "").slice(0, 12)}` : "unknown";
}

/** A bearer token or a session cookie, right or wrong: what health checks before saying more. */
function presentsCredential(c: Context<AdminEnv>): boolean {
  return Boolean(c.req.header("authorization")) || getCookie(c, SESSION) !== undefined;
}
