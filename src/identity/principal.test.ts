import fc from "fast-check";
import type { Context } from "hono";
import { describe, expect, it } from "vitest";
import type { RequestFacts } from "./identify.js";
import { principalOf } from "./principal.js";

const facts = (ip: string, headers: Record<string, string> = {}, claims?: Record<string, unknown>): RequestFacts => ({
  ip,
  matchPath: "/orders",
  headers: new Headers(headers),
  url: new URL("https://sluice.test/orders"),
  ...(claims ? { claims } : {}),
});

describe('principal = "auto"', () => {
  it("is the verified JWT's sub, spelled as principal = \"jwt:sub\" is, whatever the IP or the token's other claims", async () => {
    const alice = await principalOf(["auto"], facts("198.51.100.1", { authorization: "Bearer t1" }, { sub: "alice" }));
    const again = await principalOf(
      ["auto"],
      facts("203.0.113.9", { authorization: "Bearer t2" }, { sub: "alice", iat: 2 }),
    );
    expect(again).toBe(alice);
    expect(alice).toBe(await principalOf(["jwt:sub"], facts("192.0.2.1", {}, { sub: "alice" })));
    expect(await principalOf(["auto"], facts("198.51.100.1", {}, { sub: "bob" }))).not.toBe(alice);
  });

  it("is a hash of the Authorization header without verified claims (or without a sub): never the credential itself", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ minLength: 8 }).filter((s) => /^[\x21-\x7e]+$/.test(s)),
        fc.ipV4(),
        fc.ipV4(),
        async (credential, ip1, ip2) => {
          const header = { authorization: `Bearer ${credential}` };
          const one = await principalOf(["auto"], facts(ip1, header));
          expect(await principalOf(["auto"], facts(ip2, header, { iss: "no-sub" }))).toBe(one);
          expect(one).not.toContain(credential);
          expect(one).toMatch(/^\[\["authorization:sha256","[0-9a-f]{32}"\]\]$/);
          expect(await principalOf(["auto"], facts(ip1, { authorization: `Bearer ${credential}x` }))).not.toBe(one);
        },
      ),
      { numRuns: 50 },
    );
  });

  it('is the IP, spelled as principal = "ip" is, when the request carries no credential', async () => {
    const byIp = await principalOf(["auto"], facts("198.51.100.7"));
    expect(byIp).toBe(await principalOf(["ip"], facts("198.51.100.7")));
    expect(await principalOf(["auto"], facts("198.51.100.8"))).not.toBe(byIp);
    // a blank header is no credential (RFC 9110 whitespace is not part of the value)
    expect(await principalOf(["auto"], facts("198.51.100.7", { authorization: " \t" }))).toBe(byIp);
  });

  it("never shares a principal between the three forms, nor with a header principal of the same value", async () => {
    const values = new Set([
      await principalOf(["auto"], facts("1.2.3.4", {}, { sub: "1.2.3.4" })),
      await principalOf(["auto"], facts("1.2.3.4", { authorization: "1.2.3.4" })),
      await principalOf(["auto"], facts("1.2.3.4")),
      await principalOf(["header:authorization"], facts("1.2.3.4", { authorization: "1.2.3.4" })),
    ]);
    expect(values.size).toBe(4);
  });
});

describe("a principal from the app's code", () => {
  const inApp = (ip: string): RequestFacts => ({ ...facts(ip), context: {} as Context });
  const of = (user: string | undefined, ip: string) => principalOf(["code"], inApp(ip), () => user);

  it("is the function's result, whatever the address; undefined falls back to the IP, tagged", async () => {
    expect(await of("u1", "198.51.100.1")).toBe(await of("u1", "203.0.113.1"));
    expect(await of("u1", "198.51.100.1")).not.toBe(await of("u2", "198.51.100.1"));
    const missing = await of(undefined, "198.51.100.1");
    expect(missing).toContain("198.51.100.1");
    // a user whose id is an address never shares the fallback's principal, nor the `ip` principal's
    expect(missing).not.toBe(await of("198.51.100.1", "198.51.100.1"));
    expect(missing).not.toBe(await principalOf(["ip"], facts("198.51.100.1")));
  });
});

describe('principal = "auto" and the clock', () => {
  it("a token refused only by its time claims is still its sub: one token, one principal", async () => {
    const header = { authorization: "Bearer t-expired" };
    const verified = await principalOf(["auto"], facts("198.51.100.1", header, { sub: "alice" }));
    const expired = await principalOf(["auto"], { ...facts("203.0.113.9", header), signedClaims: { sub: "alice" } });
    expect(expired).toBe(verified);
    // verified claims win over signed ones, as they are the request's own
    const both = { ...facts("203.0.113.9", header, { sub: "alice" }), signedClaims: { sub: "bob" } };
    expect(await principalOf(["auto"], both)).toBe(verified);
  });
});
