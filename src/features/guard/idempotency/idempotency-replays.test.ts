import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../config/index.js";

const ORIGIN_URL = "https://api.example.com";
const route = (idempotency: Record<string, unknown>) => ({
  routes: [{ name: "orders", match: "/orders", idempotency }],
});

describe("idempotency.replays: the bound on one principal's replays", () => {
  it("is 60 a minute by default, and takes a rate written like a tier's", () => {
    const replaysOf = (idempotency: Record<string, unknown>) => {
      const r = loadConfig({ ORIGIN_URL, SLUICE: route(idempotency) });
      if (!r.ok) throw r.error;
      return r.config.routes[0]?.idempotency?.replays;
    };
    expect(replaysOf({})).toEqual({ rate: 60, period: 60_000 });
    expect(replaysOf({ replays: "5/1h" })).toEqual({ rate: 5, period: 3_600_000 });
  });

  it.each(["0/1m", "60", "60/1w", "many"])("refuses %j, naming the field", (replays) => {
    const r = loadConfig({ ORIGIN_URL, SLUICE: route({ replays }) });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.message).toMatch(/^SLUICE\.routes\[0\] \("orders"\)\.idempotency\.replays: /);
  });
});
