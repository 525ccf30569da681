import { z } from "zod";

export const jwtSettings = z
  .object({
    /** The variable (a secret) holding the HMAC key; ignored when jwks_url is set. */
    secret_env: z
      .string()
      .regex(/^[A-Z_][A-Z0-9_]*$/, "must be an environment variable name")
      .default("SLUICE_JWT_SECRET"),
    alg: z
      .enum(["HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "EdDSA"])
      .default("HS256"),
    jwks_url: z.url({ protocol: /^https?$/ }).optional(),
    issuer: z.string().optional(),
    audience: z.string().optional(),
  })
  .strict();
