import type { Context, MiddlewareHandler } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { clientIp } from "../identity/identify.js";
import { Problem, type ProblemInit } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";
import { issueSession, sessionOf, tokenMatches, type Session } from "./auth.js";
import { ADMIN_SESSION_COOKIE, type AdminEnv } from "../operator/context.js";
import { endSession, recordSession, touchSession, type SessionRecords } from "./sessions.js";
import { beginAuthAttempt, throttled, type AuthThrottle } from "./throttle.js";
import { logFailure } from "../util/log.js";

/** The dashboard's session cookie. */
const SESSION = ADMIN_SESSION_COOKIE;
/** Where the session cookie is sent: the admin API only. */
const SESSION_PATH = "/__sluice";
const HEALTH = "/__sluice/health";
/** The dashboard page (a login form until signed in) and the login form's target check for themselves. */
const OPEN = new Set(["/__sluice", "/__sluice/", "/__sluice/login"]);

const API_OFF: ProblemInit = {
  type: PROBLEMS.notFound,
  detail: "the admin API is off: no SLUICE_ADMIN_TOKEN is set",
};
/** Sessions are checked against their record in Redis: without it none can be opened or used. */
const SESSIONS_UNAVAILABLE: ProblemInit = {
  type: PROBLEMS.dashboardSessionsUnavailable,
  detail:
    "dashboard sessions are kept in the home region's Redis, which could not be reached: use Authorization: Bearer <SLUICE_ADMIN_TOKEN>",
};
const UNAUTHORISED: ProblemInit = {
  type: PROBLEMS.unauthorized,
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
export function tokenGate(throttle: AuthThrottle): MiddlewareHandler<AdminEnv> {
  return async (c, next) => {
    const token = c.env.SLUICE_ADMIN_TOKEN;
    const health = c.req.path === HEALTH;
    if (health && (!token || !presentsCredential(c))) return next();
    if (!token) throw new Problem(API_OFF);
    if (OPEN.has(c.req.path)) return next();
    const authorised = await authenticate(c, token, throttle, health);
    c.set("authorised", authorised);
    // a wrong credential on health still gets the public answer, as no credential does
    if (!authorised && !health) throw new Problem(UNAUTHORISED);
    return next();
  };
}

/**
 * The bearer token (throttled), else the session cookie (not throttled: see `throttledCompare`).
 * A session that cannot be checked (Redis down) is a 503, but on health, which gives the public
 * answer then.
 */
async function authenticate(
  c: Context<AdminEnv>,
  token: string,
  throttle: AuthThrottle,
  health: boolean,
): Promise<boolean> {
  const bearer = c.req.header("authorization");
  if (bearer) return throttledCompare(c, throttle, () => tokenMatches(bearer, token));
  // the cookie rides along on any request from a browser, cross-site forms included: changes
  // made with it must have a JSON body, which no cross-site form can send
  if (c.req.method !== "GET" && !(c.req.header("content-type") ?? "").startsWith("application/json")) {
    throw new Problem({ type: PROBLEMS.jsonRequired, detail: "changes take a JSON body" });
  }
  const state = await sessionState(c, token);
  if (state === "unchecked" && !health) throw new Problem(SESSIONS_UNAVAILABLE);
  return state === "valid";
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

/** Whether the request carries a live dashboard session for this token (a 503 when that cannot be checked). */
export async function signedIn(c: Context<AdminEnv>, token: string): Promise<boolean> {
  const state = await sessionState(c, token);
  if (state === "unchecked") throw new Problem(SESSIONS_UNAVAILABLE);
  return state === "valid";
}

/**
 * The request's session: `valid` when its cookie is signed for this token, within its 12 hours,
 * and its record is still in Redis (which renews the idle window); `invalid` otherwise;
 * `unchecked` when the cookie is good but Redis could not say.
 */
async function sessionState(c: Context<AdminEnv>, token: string): Promise<"valid" | "invalid" | "unchecked"> {
  const session = await sessionOf(getCookie(c, SESSION), token);
  if (!session) return "invalid";
  const records = sessionRecords(c);
  if (!records) return "unchecked";
  try {
    return (await touchSession(records, session)) ? "valid" : "invalid";
  } catch (e) {
    logFailure("admin_session_check_failed", { error: String(e) });
    return "unchecked";
  }
}

/** Where sessions are recorded: the home region's Redis, with the configured idle window. */
function sessionRecords(c: Context<AdminEnv>): SessionRecords | undefined {
  const store = c.get("stores").offPath();
  const config = c.get("config");
  return store && { store, keyPrefix: config.key_prefix, idleMs: config.admin_session_idle };
}

/** Gives the browser a fresh session cookie (HttpOnly, SameSite=Strict, Secure over https) once its record is written. */
export async function startSession(c: Context<AdminEnv>, token: string): Promise<void> {
  const issued = await issueSession(token);
  const records = sessionRecords(c);
  if (!records) throw new Problem(SESSIONS_UNAVAILABLE);
  await recordSession(records, issued.session).catch((e: unknown) => {
    logFailure("admin_session_start_failed", { error: String(e) });
    throw new Problem(SESSIONS_UNAVAILABLE);
  });
  const secure = new URL(c.req.url).protocol === "https:";
  setCookie(c, SESSION, issued.value, {
    path: SESSION_PATH,
    httpOnly: true,
    sameSite: "Strict",
    maxAge: issued.maxAgeS,
    secure,
  });
}

/**
 * Signs the request's session out: deletes its record, so its cookie is refused wherever it is
 * replayed, and tells the browser to drop it. Whether there was a session to end.
 */
export async function signOut(c: Context<AdminEnv>, token: string): Promise<boolean> {
  const session: Session | undefined = await sessionOf(getCookie(c, SESSION), token);
  const records = sessionRecords(c);
  if (session && !records) throw new Problem(SESSIONS_UNAVAILABLE);
  if (session && records) {
    await endSession(records, session).catch((e: unknown) => {
      logFailure("admin_session_end_failed", { error: String(e) });
      throw new Problem(SESSIONS_UNAVAILABLE);
    });
  }
  deleteCookie(c, SESSION, { path: SESSION_PATH, secure: new URL(c.req.url).protocol === "https:" });
  return session !== undefined;
}

/** A bearer token or a session cookie, right or wrong: what health checks before saying more. */
function presentsCredential(c: Context<AdminEnv>): boolean {
  return Boolean(c.req.header("authorization")) || getCookie(c, SESSION) !== undefined;
}
