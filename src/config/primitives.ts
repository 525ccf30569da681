import type { Context } from "hono";
import * as z from "zod/mini";
import { parseDuration } from "./duration.js";
import { deferred, lazy } from "./lazy.js";
import { CODE_PART } from "../identity/identify.js";
import { AUTO_PRINCIPAL } from "../identity/principal.js";

// The shared pieces of the configuration's schemas: names, durations, key parts, rates, methods
// and principals, which the features' schemas (src/features/*/schema.ts) are written in. Each is
// built on first use (./lazy.ts): importing the configuration builds no schema.

/** Names end up inside Redis key names and headers: keep them to a safe alphabet. */
export const name = /* @__PURE__ */ lazy(() =>
  z
    .string()
    .check(z.regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/, "must be 1-63 characters of letters, digits, '_', '.', '-'")),
);

/**
 * An MCP tool's name as the configuration names it (`mcp.guard`, `mcp.pass`, a limit's `tools`):
 * 1-128 characters of letters, digits, '_', '.', '-' (the specification's own alphabet for tool names).
 */
export const toolName = /* @__PURE__ */ lazy(() =>
  z
    .string()
    .check(
      z.regex(
        /^[A-Za-z0-9_.-]{1,128}$/,
        "must be an MCP tool name: 1-128 characters of letters, digits, '_', '.', '-'",
      ),
    ),
);

/**
 * A field holding one of `values`, `fallback` when left out. Its schema is built only when a
 * configuration sets it (./lazy.ts): the enum, a RegExp and a Set each, is not built at every
 * middleware's construction for the fields its options leave out.
 */
export const oneOf = <const T extends readonly [string, ...string[]]>(values: T, fallback: T[number]) =>
  z._default(
    deferred(() => z.enum(values)),
    fallback,
  );

/** A flag, false when left out; its schema built only when a configuration sets it (as `oneOf`'s). */
export const flag = () => z._default(deferred(z.boolean), false);

export const duration = /* @__PURE__ */ lazy(() =>
  z.pipe(
    z.string(),
    z.transform((text: string, ctx) => {
      const ms = parseDuration(text);
      if (ms === undefined) {
        ctx.issues.push({ code: "custom", message: notADuration(text), input: text });
        return z.NEVER;
      }
      return ms;
    }),
  ),
);

const notADuration = (text: string) => `"${text}" is not a duration like "500ms", "1s", "1m", "1h" or "1d"`;

/** `true`, `false` or a duration (ms): a limit's `lease` (docs/regions-and-leases.md, Leases; docs/algorithms.md, In-flight caps). */
export const booleanOrDuration = /* @__PURE__ */ lazy(() =>
  z.pipe(
    z.union([z.boolean(), z.string()]),
    z.transform((v: boolean | string, ctx) => {
      if (typeof v === "boolean") return v;
      const ms = parseDuration(v);
      if (ms === undefined) ctx.issues.push({ code: "custom", message: notADuration(v), input: v });
      return ms ?? z.NEVER;
    }),
  ),
);

/** One part of an identity: where the identifier of a bucket comes from. */
export const keyPart = /* @__PURE__ */ lazy(() =>
  z.string().check(
    z.superRefine((part, ctx) => {
      // "tool": the called tool's name, on a route with an `mcp` table (src/features/mcp/)
      if (part === "ip" || part === "global" || part === "path" || part === "tool") return;
      const m = /^(header|query|cookie|jwt):(.+)$/.exec(part);
      if (!m) {
        ctx.addIssue({
          code: "custom",
          message: `"${part}" is not a key: use ip, global, path, tool, header:<name>, query:<name>, cookie:<name> or jwt:<claim>`,
        });
        return;
      }
      if (m[1] === "header" && !/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(m[2] ?? "")) {
        ctx.addIssue({ code: "custom", message: `"${part}": not a valid header name` });
      }
    }),
  ),
);

/** A tier's rate, written "600/1m": that many per that duration (the tier's burst is its rate). */
export const tierRate = /* @__PURE__ */ lazy(() =>
  z.pipe(
    z.string(),
    z.transform((text: string, ctx) => {
      const m = /^(\d{1,9})\/(.+)$/.exec(text.trim());
      const period = m ? parseDuration(m[2] as string) : undefined;
      if (!m || period === undefined || Number(m[1]) < 1) {
        ctx.issues.push({ code: "custom", message: `"${text}" is not a rate like "60/1m"`, input: text });
        return z.NEVER;
      }
      return { rate: Number(m[1]), period };
    }),
  ),
);

export const method = /* @__PURE__ */ lazy(() =>
  z.pipe(
    z.string().check(z.regex(/^[A-Za-z]+$/, "must be an HTTP method")),
    z.transform((m: string) => m.toUpperCase()),
  ),
);

/** A principal from the app's own code: the request's context in, the principal (or `undefined`: missing) out. */
export type PrincipalFunction = (c: Context) => string | undefined;

/**
 * Whose idempotency keys or session locks: `auto` (the verified JWT's sub, else a hash of the
 * Authorization header, else the IP; src/identity/principal.ts), an identity in the key syntax of
 * limits, or (in the middleware's options only) a function of the Hono context. `auto` stands
 * alone: combined with other parts it would not say which credential it is.
 */
export const principal = /* @__PURE__ */ lazy(() =>
  z
    ._default(
      z.union([
        z.string(),
        z.array(z.string()).check(z.minLength(1), z.maxLength(4)),
        z.custom<PrincipalFunction>((v) => typeof v === "function", 'must be key parts, "auto" or a function'),
      ]),
      AUTO_PRINCIPAL,
    )
    .check(
      z.superRefine((p, ctx) => {
        if (p === AUTO_PRINCIPAL || typeof p === "function") return;
        const parts = Array.isArray(p) ? p : [p];
        parts.forEach((part, i) => {
          const checked = keyPart().safeParse(part);
          const at = Array.isArray(p) ? [i] : [];
          if (part === AUTO_PRINCIPAL)
            ctx.addIssue({
              code: "custom",
              path: at,
              message: '"auto" stands alone: it cannot be combined with other parts',
            });
          else if (!checked.success)
            for (const issue of checked.error.issues)
              ctx.addIssue({ code: "custom", path: at, message: `${issue.message}, or "auto"` });
        });
      }),
    ),
);

/**
 * A principal as the features read it: its key parts, and the app's function when it is one. A
 * function is read as the one part "code" (src/identity/identify.ts), so its result is hashed like
 * every identifier and a missing one (`undefined`) falls back to the IP as a missing part does.
 */
export function compiledPrincipal(p: string | string[] | PrincipalFunction): {
  principal: string[];
  principalOf: PrincipalFunction | undefined;
} {
  if (typeof p === "function") return { principal: [CODE_PART], principalOf: p };
  return { principal: Array.isArray(p) ? p : [p], principalOf: undefined };
}
