import { Hono } from "hono";
import { adminApp } from "./admin/index.js";
import type { Env } from "./env.js";
import { gate } from "./gateway.js";
import type { Defer } from "./limiter/decide.js";
import { normalisePath } from "./routing/normalise.js";
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

/**
 * The sluice Worker as a Hono app. Every path goes through the gate; anything that still
 * throws becomes a problem response that carries the decision headers, never a bare 500.
 */
export function createApp(): Hono<{ Bindings: Env }> {
  const app = new Hono<{ Bindings: Env }>();
  const admin = adminApp();
  app.all("*", (c) => {
    // the admin API is found by the normalised path too: `//__sluice/x` or `/__SLUICE/x` never reach the origin
    const normal = normalisePath(new URL(c.req.url).pathname);
    if (normal.ok && (normal.path.match === "/__sluice" || normal.path.match.startsWith("/__sluice/"))) {
      const url = new URL(c.req.url);
      url.pathname = normal.path.match;
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
