/**
 * The handler's view of a scope (`c.get("sluice")`), published once by the mount: it reads what the
 * steps decided when it is read, and reads as a plain object (JSON, a spread).
 */
import { describe, expect, it } from "vitest";
import { decisionView, type DecidedLimit, type Scope } from "./context.js";

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

describe("decisionView", () => {
  it("reads the steps' decision as it stands, not as it stood when published", () => {
    const scope = scopeOf();
    const view = decisionView(scope);
    expect(view.limits).toEqual([]);
    scope.limits = { outcomes: [outcome], degraded: false, withoutRedis: false, decidedAt: 1_000 };
    scope.decision = "shadow";
    scope.guards = { sluiceHeaders: { "sluice-fencing-token": "7" } };
    expect(view.verdict).toBe("shadow");
    expect(view.fencingToken).toBe("7");
    expect(view.limits).toEqual([
      { name: "per-ip", allowed: true, remaining: 4, reset: 2, resetMs: 1500, resetAt: 2_500, retryAfterMs: 0 },
    ]);
  });

  it("serialises and spreads as the plain decision it stands for", () => {
    const scope = scopeOf();
    scope.route = { name: "api" } as Scope["route"];
    scope.guards = { sluiceHeaders: { "idempotency-key": "k1" } };
    const view = decisionView(scope);
    const plain = { verdict: "allow", region: "eu", route: "api", limits: [], idempotencyKey: "k1" };
    expect(JSON.parse(JSON.stringify(view))).toEqual(plain);
    expect({ ...view }).toEqual({ ...plain, fencingToken: undefined });
  });
});
