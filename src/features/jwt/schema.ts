import * as z from "zod/mini";
import { lazy } from "../../config/lazy.js";

export const jwtSettings = /* @__PURE__ */ lazy(() =>
  z.strictObject({
    /** The variable (a secret) holding the HMAC key; ignored when jwks_url is set. */
    secret_env: z._default(
      z.string().check(z.regex(/^[A-Z_][A-Z0-9_]*$/, "must be an environment variable name")),
      "SLUICE_JWT_SECRET",
    ),
    alg: z._default(
      z.enum(["HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "EdDSA"]),
      "HS256",
    ),
    jwks_url: z.optional(z.url({ protocol: /^https?$/ })),
    issuer: z.optional(z.string()),
    audience: z.optional(z.string()),
  }),
);
