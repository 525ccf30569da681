/**
 * The handler's view of a scope (`c.get("sluice")`), published once by the mount: it reads what the
 * steps decided when it is read, and reads as a plain object (JSON, a spread). The capabilities'
 * results beside it (`sluiceLimits`, `sluiceGuards`, `sluiceSwitch`) are typed on every Hono
 * context, and each mount reads back its own.
 */
import { Hono, type Context } from "hono";
import { describe, expect, expectTypeOf, it } from "vitest";
import { decisionView, ownResult, publish, type Scope, type SluiceDecision } from "./context.js";
import type { DecidedLimit, LimitSummary } from "./features/rate-limit/vars.js";
import type { GuardsHeld } from "./features/guard/vars.js";
import type { SwitchInForce } from "./features/access/mode/vars.js";

/** The parts of a scope the view reads; the rest of the request does not matter to it. */
function scopeOf(): Scope {
  const decided: Partial<Scope> = { region: "eu", decision: "allow" };
  return decided as Scope;
}

const outcome: DecidedLimit = {
  limit: { name: "per-ip" },
  allowed: true,
  remaining: 4,
  resetMs: 1500,
  retryAfterMs: 0,
};

const decided = (name: string): LimitSummary => ({
  outcomes: [{ ...outcome, limit: { name } }],
  degraded: false,
  withoutRedis: false,
  decidedAt: 1_000,
});

/** Runs `body` with a request's Hono context, as a handler of a plain `new Hono()` app has it. */
async function inRequest<T>(body: (c: Context) => T): Promise<T> {
  const app = new Hono();
  let out: { value: T } | undefined;
  app.get("/", (c) => {
    out = { value: body(c) };
    return c.body(null, 204);
  });
  const res = await app.request("/");
  if (!out) throw new Error(`the handler did not run: ${res.status}`);
  return out.value;
}

describe("decisionView", () => {
  it("reads the steps' decision as it stands, not as it stood when published", async () => {
    await inRequest((c) => {
      const scope = scopeOf();
      const view = decisionView(c, scope);
      expect(view.limits).toEqual([]);
      publish(c, scope, "sluiceLimits", decided("per-ip"));
      scope.decision = "shadow";
      publish(c, scope, "sluiceGuards", { sluiceHeaders: { "sluice-fencing-token": "7" } });
      expect(view.verdict).toBe("shadow");
      expect(view.fencingToken).toBe("7");
      expect(view.limits).toEqual([
        { name: "per-ip", allowed: true, remaining: 4, reset: 2, resetMs: 1500, resetAt: 2_500, retryAfterMs: 0 },
      ]);
    });
  });

  it("serialises and spreads as the plain decision it stands for", async () => {
    await inRequest((c) => {
      const scope = scopeOf();
      scope.route = { name: "api" } as Scope["route"];
      publish(c, scope, "sluiceGuards", { sluiceHeaders: { "idempotency-key": "k1" } });
      const view = decisionView(c, scope);
      const plain = { verdict: "allow", region: "eu", route: "api", limits: [], idempotencyKey: "k1" };
      expect(JSON.parse(JSON.stringify(view))).toEqual(plain);
      expect({ ...view }).toEqual({ ...plain, fencingToken: undefined });
    });
  });

  it("shows the nearest limits and guards the request has, whichever mount decided them", async () => {
    await inRequest((c) => {
      const outer = scopeOf();
      const inner = scopeOf();
      publish(c, outer, "sluiceLimits", decided("outer"));
      publish(c, outer, "sluiceGuards", { sluiceHeaders: { "sluice-fencing-token": "1" } });
      const view = decisionView(c, inner);
      // a mount nearer the handler that decided no limits shows those further out
      expect(view.limits.map((l) => l.name)).toEqual(["outer"]);
      // the claim the request holds, though a mount further out took it
      expect(view.fencingToken).toBe("1");
      publish(c, inner, "sluiceLimits", decided("inner"));
      publish(c, inner, "sluiceGuards", { sluiceHeaders: { "sluice-fencing-token": "2" } });
      expect(view.limits.map((l) => l.name)).toEqual(["inner"]);
      expect(view.fencingToken).toBe("2");
    });
  });
});

describe("a capability's result on the context", () => {
  it("is read back by the mount that decided it, never by another", async () => {
    await inRequest((c) => {
      const outer = scopeOf();
      const inner = scopeOf();
      const other = scopeOf();
      publish(c, outer, "sluiceLimits", decided("outer"));
      publish(c, inner, "sluiceLimits", decided("inner"));
      // the handler reads the last one set, as any Hono variable
      expect(c.get("sluiceLimits")?.outcomes[0]?.limit.name).toBe("inner");
      // each mount its own, though a nearer one has set its own since
      expect(ownResult(c, outer, "sluiceLimits")?.outcomes[0]?.limit.name).toBe("outer");
      expect(ownResult(c, inner, "sluiceLimits")?.outcomes[0]?.limit.name).toBe("inner");
      expect(ownResult(c, other, "sluiceLimits")).toBeUndefined();
      expect(ownResult(c, outer, "sluiceGuards")).toBeUndefined();
    });
  });

  it("is the request's own copy: one value published on two requests is told apart", async () => {
    const shared: SwitchInForce = { mode: "open", until: 9_000 };
    const first = scopeOf();
    const second = scopeOf();
    const seen = await inRequest((c1) => {
      publish(c1, first, "sluiceSwitch", shared);
      return inRequest((c2) => {
        publish(c2, second, "sluiceSwitch", shared);
        return [ownResult(c1, first, "sluiceSwitch"), ownResult(c2, second, "sluiceSwitch")];
      });
    });
    expect(seen).toEqual([shared, shared]);
  });

  it("is typed on a plain `new Hono()`'s context, no environment generic needed", () => {
    const app = new Hono();
    app.get("/", (c) => {
      expectTypeOf(c.get("sluice")).toEqualTypeOf<SluiceDecision>();
      expectTypeOf(c.get("sluiceLimits")).toEqualTypeOf<LimitSummary | undefined>();
      expectTypeOf(c.get("sluiceGuards")).toEqualTypeOf<GuardsHeld | undefined>();
      expectTypeOf(c.get("sluiceSwitch")).toEqualTypeOf<SwitchInForce | undefined>();
      // @ts-expect-error: the decision has no such field (tsc checks it; an untyped variable would pass)
      void c.get("sluice").allowed;
      return c.body(null);
    });
    expect(app.routes).toHaveLength(1);
  });
});
