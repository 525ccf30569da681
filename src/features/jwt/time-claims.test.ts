import { sign } from "hono/jwt";
import { describe, expect, it } from "vitest";
import { JwksCache, timeRefusal, verifyBearer } from "./jwt.js";

/** verifyBearer's time claims, checked after the signature: the clock decides admission, never who the token names. */
const SECRET = "time-claims-secret-0123456789abcdef";
const settings = { secret_env: "SLUICE_JWT_SECRET", alg: "HS256" as const, issuer: "https://issuer.test" };
const now = () => Math.floor(Date.now() / 1000);
const request = async (claims: Record<string, unknown>, secret = SECRET) =>
  new Request("https://sluice.test/", {
    headers: { authorization: `Bearer ${await sign({ iss: settings.issuer, ...claims }, secret, "HS256")}` },
  });
const verified = async (claims: Record<string, unknown>, secret = SECRET) =>
  verifyBearer(await request(claims, secret), settings, SECRET, new JwksCache());

describe("verifyBearer and the time claims", () => {
  it("admits a token within its times, with its claims", async () => {
    const v = await verified({ sub: "alice", iat: now() - 5, nbf: now() - 5, exp: now() + 60 });
    expect(v).toMatchObject({ ok: true, claims: { sub: "alice" } });
  });

  it.each([
    ["expired", { exp: now() - 1 }, /expired \(exp\)/],
    ["not yet valid", { nbf: now() + 60 }, /not valid yet \(nbf\)/],
    ["issued ahead of the clock", { iat: now() + 60 }, /issued in the future \(iat\)/],
    ["a time claim that is no number", { exp: "tomorrow" }, /expired \(exp\)/],
  ])("refuses a token %s, but tells the claims its signature vouches for", async (_what, times, detail) => {
    const v = await verified({ sub: "alice", ...times });
    expect(v.ok).toBe(false);
    if (v.ok) return;
    expect(v.detail).toMatch(detail);
    expect(v.signed).toMatchObject({ sub: "alice" });
  });

  it("tells no claims of a token whose signature or issuer does not verify, whatever its times", async () => {
    for (const v of [
      await verified({ sub: "alice", exp: now() - 60 }, "another-secret-0123456789abcdef"),
      await verified({ sub: "alice", exp: now() + 60 }, "another-secret-0123456789abcdef"),
      await verified({ sub: "alice", iss: "https://elsewhere.test", exp: now() - 60 }),
    ]) {
      expect(v.ok).toBe(false);
      expect(v).not.toHaveProperty("signed");
    }
  });

  it("timeRefusal: exp is exclusive, nbf and iat inclusive, as RFC 7519 and hono have them", () => {
    expect(timeRefusal({ exp: 100 }, 100)).toMatch(/exp/);
    expect(timeRefusal({ exp: 101 }, 100)).toBeUndefined();
    expect(timeRefusal({ nbf: 100, iat: 100 }, 100)).toBeUndefined();
    expect(timeRefusal({ nbf: 101 }, 100)).toMatch(/nbf/);
    expect(timeRefusal({ iat: 101 }, 100)).toMatch(/iat/);
    expect(timeRefusal({}, 100)).toBeUndefined();
  });
});
