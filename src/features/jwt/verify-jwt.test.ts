import { Hono } from "hono";
import { sign } from "hono/jwt";
import { describe, expect, it } from "vitest";
import { countedApp, middlewareRig } from "../../../test/support/middleware-rig.js";
import { rateLimit, verifyJwt, type RateLimitOptions, type SluiceEnv } from "../../index.js";

/** verifyJwt() (and rateLimit() keyed on its claims) in an app, in Node, against a real Redis behind the bridge. */
const { options: shared } = middlewareRig("jwt");

const SECRET = "test-hmac-secret-0123456789abcdef";

const inAnHour = () => Math.floor(Date.now() / 1000) + 3_600;
const tokenFor = (sub: string, secret = SECRET, exp = inAnHour()) => sign({ sub, exp }, secret, "HS256");
const from = (ip: string, token?: string, headers: Record<string, string> = {}): RequestInit => ({
  headers: { "CF-Connecting-IP": ip, ...(token === undefined ? {} : { Authorization: `Bearer ${token}` }), ...headers },
});

/** GET /me answers with the verified claims, as the handler finds them. */
function meApp(options: Parameters<typeof verifyJwt>[0]) {
  return countedApp(
    verifyJwt(options),
    (c) => {
      const claims = c.get("jwtPayload" as never) as { sub?: string } | undefined;
      return c.json({ sub: claims?.sub ?? null });
    },
    { path: "/me", method: "GET" },
  );
}

async function expectInvalidToken(res: Response): Promise<void> {
  expect(res.status).toBe(401);
  expect(res.headers.get("WWW-Authenticate")).toBe('Bearer error="invalid_token"');
  expect(res.headers.get("content-type")).toBe("application/problem+json");
  expect(((await res.json()) as { title: string }).title).toBe("Invalid token");
}

describe("verifyJwt()", () => {
  it("puts the verified claims on the context for the handler", async () => {
    const { app } = meApp({ ...shared(), secret: SECRET });
    const res = await app.request("/me", from("198.51.100.80", await tokenFor("alice")));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ sub: "alice" });
  });

  it("refuses a token that does not verify with 401 and WWW-Authenticate", async () => {
    const { app, calls } = meApp({ ...shared(), secret: SECRET });
    await expectInvalidToken(
      await app.request("/me", from("198.51.100.80", await tokenFor("mallory", "some-other-secret"))),
    );
    await expectInvalidToken(
      await app.request(
        "/me",
        from("198.51.100.80", await tokenFor("alice", SECRET, Math.floor(Date.now() / 1000) - 60)),
      ),
    );
    await expectInvalidToken(await app.request("/me", from("198.51.100.80", "not-a.jwt.at-all")));
    await expectInvalidToken(
      await app.request("/me", from("198.51.100.80", undefined, { Authorization: "Basic YWxpY2U6cHc=" })),
    );
    expect(calls.n).toBe(0);
  });

  it("lets a request without a token through without claims, unless required", async () => {
    const optional = meApp({ ...shared(), secret: SECRET });
    const res = await optional.app.request("/me", from("198.51.100.81"));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ sub: null });

    const required = meApp({ ...shared(), secret: SECRET, required: true });
    await expectInvalidToken(await required.app.request("/me", from("198.51.100.81")));
    expect(required.calls.n).toBe(0);
    expect((await required.app.request("/me", from("198.51.100.81", await tokenFor("bob")))).status).toBe(200);
  });

  it("reads the secret from the Worker's SLUICE_JWT_SECRET when none is given", async () => {
    const { app } = meApp(shared());
    const env = { SLUICE_JWT_SECRET: SECRET };
    const res = await app.request("/me", from("198.51.100.82", await tokenFor("carol")), env);
    expect(await res.json()).toEqual({ sub: "carol" });
    // and refuses tokens when there is no secret to verify them with
    await expectInvalidToken(await app.request("/me", from("198.51.100.82", await tokenFor("carol"))));
  });
});

describe("rateLimit() keyed on jwt:sub", () => {
  const perSubject: RateLimitOptions["limits"] = [
    { name: "per-user", key: "jwt:sub", rate: 1, period: "1h", burst: 2, lease: false },
  ];

  /** GET /api answers with the subject's remaining tokens. */
  function limitedApp(withVerifyJwt: Parameters<typeof verifyJwt>[0] | false) {
    const opts = shared();
    const app = new Hono<SluiceEnv>();
    if (withVerifyJwt) app.use("*", verifyJwt({ ...opts, ...withVerifyJwt }));
    app.use("*", rateLimit({ ...opts, limits: perSubject }));
    app.get("/api", (c) => c.json({ remaining: c.get("sluice").limits[0]?.remaining }));
    return app;
  }

  it("limits per subject across client IPs (secret from the Worker's environment)", async () => {
    const app = limitedApp({});
    const env = { SLUICE_JWT_SECRET: SECRET };
    const alice = await tokenFor("alice");
    expect((await app.request("/api", from("198.51.100.83", alice), env)).status).toBe(200);
    expect((await app.request("/api", from("198.51.100.84", alice), env)).status).toBe(200);
    const refused = await app.request("/api", from("198.51.100.85", alice), env);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { limit: string }).limit).toBe("per-user");
    // another subject, from an IP alice used: a bucket of its own
    const bob = await app.request("/api", from("198.51.100.83", await tokenFor("bob")), env);
    expect(bob.status).toBe(200);
    expect(await bob.json()).toEqual({ remaining: 1 });
  });

  it("refuses a bad token with 401 rather than falling back to another identity", async () => {
    const app = limitedApp({});
    const env = { SLUICE_JWT_SECRET: SECRET };
    await expectInvalidToken(await app.request("/api", from("198.51.100.86", await tokenFor("alice", "forged")), env));
  });

  it("limits per subject after verifyJwt({ secret }) verified the token", async () => {
    const app = limitedApp({ secret: SECRET });
    const alice = await tokenFor("alice");
    const first = await app.request("/api", from("198.51.100.87", alice));
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ remaining: 1 });
    expect((await app.request("/api", from("198.51.100.88", alice))).status).toBe(200);
    expect((await app.request("/api", from("198.51.100.89", alice))).status).toBe(429);
  });

  it("without a verifier before it, a token is a 500 naming the fix, never keyed as no token", async () => {
    const app = limitedApp(false);
    const env = { SLUICE_JWT_SECRET: SECRET };
    const res = await app.request("/api", from("198.51.100.91", await tokenFor("alice")), env);
    expect(res.status).toBe(500);
    const body = (await res.json()) as { title: string; detail: string };
    expect(body.title).toBe("Invalid sluice configuration");
    expect(body.detail).toContain("verifyJwt()");
    // no token: no claims, and the limit's `missing` policy (the IP) applies, as after a verifier
    const first = await app.request("/api", from("198.51.100.91"), env);
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ remaining: 1 });
  });

  it("with verifyJwt({ required: true }), refuses a request without a token before any limit", async () => {
    const app = limitedApp({ secret: SECRET, required: true });
    await expectInvalidToken(await app.request("/api", from("198.51.100.90")));
  });
});
