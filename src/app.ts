import { Hono } from "hono";
import { adminApp } from "./admin/index.js";
import type { Env } from "./env.js";
import { gate } from "./gateway.js";
import type { Defer } from "./limiter/decide.js";
import { DEFAULT_PATH_POLICY, normalisePath, type PathPolicy } from "./routing/normalise.js";
import { problem } from "./shed/problem.js";

/** The runtime's execution context (always there on Workers; absent when the app is called bare). */
function executionContext(c: { executionCtx: ExecutionContext }): ExecutionContext | undefined {
  try {
    return c.executionCtx;
  } catch {
    return undefined;
  }
}

/** `ctx.waitUntil` where the runtime gives one; otherwise work just runs. */
function deferrer(c: { executionCtx: ExecutionContext }): Defer {
  const ctx = executionContext(c);
  return ctx ? (work) => ctx.waitUntil(work) : (work) => void work;
}

/** `/__sluice` as a whole first segment, in any case (`/__sluice-jobs/…` is not the admin API). */
const ADMIN_PREFIX = /^\/__sluice(?=\/|$)/i;

/** The default normalisation but case-sensitive, so route and limit names reach the admin API as configured. */
const ADMIN_NAMES: PathPolicy = { ...DEFAULT_PATH_POLICY, case: "sensitive", trailing_slash: "ignore" };

/**
 * The path the admin API routes on, or `undefined` when the request is not for it. The prefix is
 * found in the case-folded normal form, so `//__sluice/x` or `/__SLUICE/x` never reach the origin;
 * the rest keeps its case (route and limit names may have capitals) and only the prefix is
 * spelled `/__sluice`.
 *
 * @example adminPath("//__SLUICE/buckets/Checkout/PerIP") // "/__sluice/buckets/Checkout/PerIP"
 */
function adminPath(pathname: string): string | undefined {
  const folded = normalisePath(pathname);
  if (!folded.ok || !ADMIN_PREFIX.test(folded.path.match)) return undefined;
  const named = normalisePath(pathname, ADMIN_NAMES);
  // case-folding changes no segment of an ASCII path, so the same prefix is there in any case
  return named.ok ? named.path.match.replace(ADMIN_PREFIX, "/__sluice") : undefined;
}

/**
 * The sluice Worker as a Hono app. Every path goes through the gate; anything that still
 * throws becomes a problem response that carries the decision headers, never a bare 500.
 */
export function createApp(): Hono<{ Bindings: Env }> {
  const app = new Hono<{ Bindings: Env }>();
  const admin = adminApp();
  app.all("*", (c) => {
    const url = new URL(c.req.url);
    const path = adminPath(url.pathname);
    if (path !== undefined) {
      url.pathname = path;
      return admin.fetch(new Request(url, c.req.raw), c.env, executionContext(c));
    }
    return gate(c.req.raw, c.env, deferrer(c));
  });
  app.onError((err) => {
    console.error(JSON.stringify({ event: "unhandled", message: err.message }));
    const res = problem({ status: 500, title: "Internal error", detail: "sluice failed to handle this request" });
    res.headers.set("Sluice-Decision", "reject");
    res.headers.set("Sluice-Region", "unknown");
    return res;
  });
  return app;
}
