import type { Context, MiddlewareHandler, Next } from "hono";
import { every } from "hono/combine";
import { decisionView, type Scope, type SluiceEnv, type Step } from "../context.js";
import { withoutSluiceHeaders } from "../origin/forward.js";
import type { ErrorAnswer } from "./error-answer.js";
import { misconfiguredStore } from "./redis-required.js";
import { ScopedProblem, type ScopeSource } from "./scope.js";
import { isMisconfigured } from "../store/deadline.js";
import { stampAndCount } from "./stamp.js";

/** What differs between the gateway and a sluice middleware in an app. */
export interface Shell {
  /** Where the request's scope comes from: the environment's configuration, or the middleware's options. */
  scope: ScopeSource;
  /** Which errors sluice answers (the gateway: all; in an app: its own problems). */
  answer: ErrorAnswer;
  /** In an app, a sluice middleware nearer the handler may have stamped the decision already. */
  nested: boolean;
}

/**
 * The request path as one middleware, the same for the gateway and for `sluice()` and the
 * single-step middlewares: the scope is made, the steps run in order (composed by Hono, each
 * one's `next` the one after it, the last one's the mount's own `next`), and what they decided is
 * stamped (`Sluice-Decision`, `Sluice-Region`) and counted once. An error is answered where it was
 * thrown (`c.error`, `c.res`), so the steps before it still do their work after the response.
 */
export function mount(shell: Shell, steps: Step[]): MiddlewareHandler<SluiceEnv> {
  const stepHandlers = steps.map((step) => inScope(step, shell.answer));
  return async (c, next) => {
    let scope: Scope | undefined;
    const scoping = scopeMaker(shell, (made) => (scope = made));
    await every(scoping, ...stepHandlers)(c, handOn(c, next));
    stampAndCount(c, scope, shell.nested);
  };
}

/**
 * The mount's `next` (the app's handler, the gateway's origin, or a sluice mount nearer the
 * handler), whose answer comes back without `Sluice-*` headers of its own: those are sluice's to
 * say, and the steps' work after the response must not find them there (an origin's
 * `Sluice-Decision: replay` refunded its own request). A nearer mount's stamp stays: it is sluice's.
 */
function handOn(c: Context<SluiceEnv>, next: Next): Next {
  return async () => {
    await next();
    if (c.get("sluiceStamped") === true || ![...c.res.headers.keys()].some((h) => h.startsWith("sluice-"))) return;
    const res = c.res;
    // Hono's setter would carry the old response's headers over: cleared first
    c.res = undefined;
    c.res = withoutSluiceHeaders(res);
  };
}

/** The mount's first middleware: the scope on the context, for every step after it; a problem answered. */
function scopeMaker(shell: Shell, made: (scope: Scope) => void): MiddlewareHandler<SluiceEnv> {
  return async (c, next) => {
    let scope: Scope;
    try {
      scope = shell.scope(c);
    } catch (e) {
      if (!(e instanceof Error)) throw e;
      // a path that cannot be normalised still has a region to stamp
      const partial = e instanceof ScopedProblem ? e.scope : undefined;
      if (partial) made(partial);
      answered(c, e, shell.answer, partial);
      return;
    }
    made(scope);
    c.set("sluiceScope", scope);
    c.set("sluice", decisionView(c, scope));
    await next();
  };
}

/**
 * A step as middleware: its scope is the one on the context when it is called (a sluice
 * middleware nearer the handler sets its own later); a response it returns becomes `c.res`.
 */
function inScope(step: Step, answer: ErrorAnswer): MiddlewareHandler<SluiceEnv> {
  return async (c: Context<SluiceEnv>, next: Next) => {
    const scope = c.get("sluiceScope");
    try {
      const res = await step(c, scope, next);
      // a step that passed the request on returns what Hono's `next` resolves to: not a response
      if (res instanceof Response) c.res = res;
    } catch (e) {
      if (!(e instanceof Error)) throw e;
      answered(c, e, answer, scope);
    }
  };
}

/**
 * An error answered where it was thrown, as Hono's `onError` would be (or thrown on, see `ErrorAnswer`).
 * A misconfigured store is the deployment's error wherever it was met, in the gateway or an app:
 * its `500` problem (src/pipeline/redis-required.ts), never the outage a step might take it for.
 */
function answered(c: Context<SluiceEnv>, thrown: Error, answer: ErrorAnswer, scope: Scope | undefined): void {
  const err = isMisconfigured(thrown) ? misconfiguredStore(thrown, scope) : thrown;
  const res = answer(err, c, scope);
  c.error = err;
  c.res = res;
}
