import { describe, expect, it } from "vitest";
import { ConfigCache } from "./config/cache.js";
import type { Env } from "./env.js";
import { Breakers } from "./features/breaker/breakers.js";
import { Runtime } from "./runtime.js";

describe("a runtime's state made on first use (Runtime.own)", () => {
  it("is one per kind for the isolate's life, and another runtime has its own", () => {
    const runtime = new Runtime();
    const breakers = runtime.own(Breakers);
    expect(breakers).toBeInstanceOf(Breakers);
    // the same breakers on every request: their windows outlive a request
    expect(runtime.own(Breakers)).toBe(breakers);
    expect(runtime.own(ConfigCache)).toBeInstanceOf(ConfigCache);
    expect(runtime.own(ConfigCache)).not.toBe(breakers);
    expect(new Runtime().own(Breakers)).not.toBe(breakers);
  });

  it("keeps a configuration validated once per environment value", () => {
    const runtime = new Runtime();
    const env: Env = { SLUICE: { routes: [{ name: "r", match: "/a", limits: [] }] }, ORIGIN_URL: "https://o.example" };
    const first = runtime.own(ConfigCache).of(env);
    expect(first.ok).toBe(true);
    expect(runtime.own(ConfigCache).of(env)).toBe(first);
  });
});
