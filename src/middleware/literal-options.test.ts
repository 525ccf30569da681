/**
 * The middleware's option types are literal: a typo in a key or a duration fails `tsc --noEmit -p .`
 * (which `npm test` runs first), each `@ts-expect-error` line below failing the compile if the types
 * ever accepted it; at run time the schema refuses the same values for JavaScript callers.
 */
import { describe, expect, it } from "vitest";
import {
  adminApi,
  ConfigError,
  defineLimits,
  idempotency,
  limiter,
  rateLimit,
  session,
  type LimitOptions,
} from "../index.js";

describe("literal option types", () => {
  it("accept every key and duration form the schema accepts", () => {
    const limits: LimitOptions[] = [
      { name: "a", key: "ip", rate: 10, period: "1s" },
      { name: "b", key: "global", rate: 10, period: "500ms", algorithm: "sliding_window" },
      { name: "c", key: ["path", "header:x-api-key"], rate: 10, period: "15m" },
      { name: "d", key: "cookie:sid", rate: 10, period: "1h", warmup: "30s" },
      { name: "e", key: ["query:tenant", "jwt:sub"], rate: 10, period: "1d", lease: false },
      { name: "f", key: "jwt:org", algorithm: "concurrency", limit: 2, lease: "2s" },
    ];
    expect(() => rateLimit({ limits })).not.toThrow();
    // the same typed array serves the admin API's `config` (before, its plain types refused a readonly key list)
    const shared: LimitOptions[] = [{ name: "per-ip", key: ["ip", "path"] as const, rate: 5, period: "1m" }];
    expect(() => adminApi({ config: { routes: [{ name: "api", match: "/api/*", limits: shared }] } })).not.toThrow();
    // and beside a route written as wrangler.toml spells it (plain strings)
    const plain = { name: "p", key: "global", rate: 1, period: "1s" as string };
    const mixed = [
      { name: "api", match: "/api/*", limits: shared },
      { name: "other", match: "/other/*", limits: [plain, ...shared] },
    ];
    expect(() => adminApi({ config: { routes: mixed } })).not.toThrow();
    expect(() => idempotency({ ttl: "1h", lease: "30s" })).not.toThrow();
    expect(() => session({ key: "header:x-session-id", lease: "10s" })).not.toThrow();
  });

  it("refuse a mistyped key, duration or algorithm (and the schema does at run time)", () => {
    // @ts-expect-error -- "ipp" is not a key part
    expect(() => rateLimit({ limits: [{ name: "a", key: "ipp", rate: 1, period: "1s" }] })).toThrow(ConfigError);
    // @ts-expect-error -- "1 second" is not a duration
    expect(() => rateLimit({ limits: [{ name: "a", rate: 1, period: "1 second" }] })).toThrow(ConfigError);
    // @ts-expect-error -- a key part in a list is checked too
    expect(() => rateLimit({ limits: [{ name: "a", key: ["ip", "heder:x"], rate: 1, period: "1s" }] })).toThrow(
      ConfigError,
    );
    // @ts-expect-error -- not an algorithm
    expect(() => rateLimit({ limits: [{ name: "a", rate: 1, period: "1s", algorithm: "leaky" }] })).toThrow(
      ConfigError,
    );
    // @ts-expect-error -- idempotency's durations too
    expect(() => idempotency({ ttl: "an hour" })).toThrow(ConfigError);
    // @ts-expect-error -- session's key too
    expect(() => session({ key: "sid" })).toThrow(ConfigError);
  });

  it("keep a limits array in a const of its own literal through defineLimits() or satisfies", () => {
    const limits = defineLimits([{ name: "per-ip", key: "ip", rate: 10, period: "1s" }]);
    expect(limits).toEqual([{ name: "per-ip", key: "ip", rate: 10, period: "1s" }]);
    expect(() => rateLimit({ name: "api", limits })).not.toThrow();
    expect(() => adminApi({ config: { routes: [{ name: "api", match: "/api/*", limits }] } })).not.toThrow();
    expect(() => limiter({ limits: defineLimits([{ name: "per-user", rate: 10, period: "1m" }]) })).not.toThrow();
    const satisfied = [{ name: "per-ip", key: ["ip", "path"], rate: 10, period: "1s" }] satisfies LimitOptions[];
    expect(() => rateLimit({ limits: satisfied })).not.toThrow();
    expect(() => rateLimit({ limits: [{ name: "per-ip", rate: 10, period: "1s" }] as const })).not.toThrow();

    const widened = [{ name: "per-ip", rate: 10, period: "1s" }];
    // @ts-expect-error -- a bare const widens "1s" to string, which no option accepts (the schema does at run time)
    expect(() => rateLimit({ limits: widened })).not.toThrow();
    // @ts-expect-error -- defineLimits() checks the array where it is written
    expect(() => rateLimit({ limits: defineLimits([{ name: "b", rate: 1, period: "1 second" }]) })).toThrow(
      ConfigError,
    );
    // @ts-expect-error -- and its keys
    expect(() => rateLimit({ limits: defineLimits([{ name: "b", key: "ipp", rate: 1, period: "1s" }]) })).toThrow(
      ConfigError,
    );
  });
});
