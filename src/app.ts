import { Hono } from "hono";
import type { Env } from "./env.js";
import { gate } from "./gateway.js";
import type { Defer } from "./limiter/decide.js";
import { problem } from "./shed/problem.js";

/** `ctx.waitUntil` where the runtime gives one (always on Workers); otherwise work just runs. */
function deferrer(c: { executionCtx: ExecutionContext }): Defer {
  try {
    const ctx = c.executionCtx;
    return (work) => ctx.waitUntil(work);
  } catch {
    return (work) => void work;
  }
}

/**
 * The sluice Worker as a Hono app. Every path goes through the gate; anything that still
 * throws becomes a problem response that carries the decision headers, never a bare 500.
 */
export function createApp(): Hono<{ Bindings: Env }> {
  const app = new Hono<{ Bindings: Env }>();
  app.all("*", (c) => gate(c.req.raw, c.env, deferrer(c)));
  app.onError((err) => {
    console.error(JSON.stringify({ event: "unhandled", message: err.message }));
    const res = problem({ status: 500, title: "Internal error", detail: "sluice failed to handle this request" });
    res.headers.set("Sluice-Decision", "reject");
    res.headers.set("Sluice-Region", "unknown");
    return res;
  });
  return app;
}
