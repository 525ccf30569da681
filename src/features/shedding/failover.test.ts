import { describe, expect, it } from "vitest";
import { loadConfig } from "../../config/index.js";
import type { OriginOutcome, OriginReply } from "../../origin/forward.js";
import { failoverReason, spareRequest } from "./failover.js";

/**
 * When a failed request may go to the divert origin (src/features/shedding/failover.ts): the
 * failure must be one `divert_on` names, and sending the request again must not risk a second
 * side effect. The workerd tests (test/integration/failover-worker.test.ts) cover the path end to end.
 */
function routeOf(over: Record<string, unknown>) {
  const r = loadConfig({
    ORIGIN_URL: "https://api.example.com",
    SLUICE: { routes: [{ name: "r", match: "/r/*", divert_url: "https://dr.example.com", ...over }] },
  });
  if (!r.ok) throw r.error;
  return r.config.routes[0]!;
}

const failover = { divert_on: ["5xx", "timeout"] };
const claimed = { "idempotency-key": "k-1", "sluice-fencing-token": "7" };

/** A request as failover reads it: its route, method and what its guards hold (its own mount's `sluiceGuards`). */
function scopeOf(
  method: string,
  over: Record<string, unknown> = failover,
  sluiceHeaders = {},
): Parameters<typeof failoverReason>[0] {
  return { route: routeOf(over), method, guards: { sluiceHeaders } };
}

function reply(outcome: OriginOutcome, status = 502): OriginReply {
  return { outcome, response: new Response(null, { status }), sent: new Headers() };
}

describe("failoverReason", () => {
  it.each([
    ["a GET's 5xx", "GET", reply("answered", 503), "5xx"],
    ["a GET's broken connection", "GET", reply("broken"), "5xx"],
    ["a GET's timeout", "GET", reply("timeout", 504), "timeout"],
    ["a HEAD's 5xx", "HEAD", reply("answered", 500), "5xx"],
    ["a POST never sent", "POST", reply("unreachable"), "5xx"],
  ])("diverts %s", (_, method, r, reason) => {
    expect(failoverReason(scopeOf(method), r)).toBe(reason);
  });

  it.each([
    ["a GET's 4xx", "GET", reply("answered", 404)],
    ["a GET's 2xx", "GET", reply("answered", 200)],
    ["an interim-only answer", "GET", reply("unrelayable")],
    ["a POST's 5xx (it may have acted)", "POST", reply("answered", 503)],
    ["a POST's timeout", "POST", reply("timeout", 504)],
    ["a POST's broken connection", "POST", reply("broken")],
    ["a DELETE's 5xx", "DELETE", reply("answered", 500)],
  ])("keeps %s as it is", (_, method, r) => {
    expect(failoverReason(scopeOf(method), r)).toBeUndefined();
  });

  it("diverts only the failures divert_on names", () => {
    const only5xx = { divert_on: ["5xx"] };
    expect(failoverReason(scopeOf("GET", only5xx), reply("timeout", 504))).toBeUndefined();
    expect(failoverReason(scopeOf("GET", only5xx), reply("answered", 503))).toBe("5xx");
    const onlyTimeout = { divert_on: ["timeout"] };
    expect(failoverReason(scopeOf("GET", onlyTimeout), reply("answered", 503))).toBeUndefined();
  });

  it("under an idempotency claim: a 5xx with on_origin_error = release, a request never sent; never an unknown outcome", () => {
    const release = { ...failover, idempotency: {} };
    const hold = { ...failover, idempotency: { on_origin_error: "hold" } };
    expect(failoverReason(scopeOf("POST", release, claimed), reply("answered", 503))).toBe("5xx");
    expect(failoverReason(scopeOf("POST", release, claimed), reply("unreachable"))).toBe("5xx");
    expect(failoverReason(scopeOf("POST", hold, claimed), reply("unreachable"))).toBe("5xx");
    expect(failoverReason(scopeOf("POST", hold, claimed), reply("answered", 503))).toBeUndefined();
    expect(failoverReason(scopeOf("POST", release, claimed), reply("timeout", 504))).toBeUndefined();
    expect(failoverReason(scopeOf("POST", release, claimed), reply("broken"))).toBeUndefined();
    // a claimed GET is a claim like any other: its timeout's outcome is for the claim to learn
    expect(failoverReason(scopeOf("GET", release, claimed), reply("timeout", 504))).toBeUndefined();
  });
});

describe("spareRequest", () => {
  const post = () => new Request("https://sluice.test/r/x", { method: "POST", body: "{}" });

  it("sends a request without a body again as it is", () => {
    const get = new Request("https://sluice.test/r/x");
    expect(spareRequest(get, scopeOf("GET"))).toBe(get);
  });

  it("copies a body sluice kept (an idempotency fingerprint read it), and only that one", async () => {
    const kept = post();
    const copy = spareRequest(kept, { ...scopeOf("POST"), guards: { sluiceHeaders: {}, bodyKept: true } });
    expect(copy).not.toBe(kept);
    expect(await copy?.text()).toBe("{}");
    expect(spareRequest(post(), scopeOf("POST"))).toBeUndefined();
  });

  it("keeps nothing for a route that does not fail over on failures", () => {
    const get = new Request("https://sluice.test/r/x");
    expect(spareRequest(get, scopeOf("GET", { divert_on: ["limit"], on_limit: "divert" }))).toBeUndefined();
  });
});
