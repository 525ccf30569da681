import * as z from "zod/mini";
import { lazy } from "../../../config/lazy.js";
import { compiledPrincipal, duration, method, principal, tierRate } from "../../../config/primitives.js";
import { isJsonPointer } from "./json-pointer.js";
import { enLocale } from "../../../config/messages.js";
import { leaseProblem } from "../../../util/renewal.js";
import { reconcileFields } from "./reconcile-schema.js";

/** `derive = { fields, window }`: the key is these JSON pointers' values in the body, one per window (src/features/idempotency/derive.ts). */
const deriveFields = /* @__PURE__ */ lazy(() =>
  z.strictObject({
    fields: z
      .array(
        z
          .string()
          .check(
            z.maxLength(256),
            z.refine(
              isJsonPointer,
              'must be a JSON pointer into the body such as "/user_id" (RFC 6901: "~0" is "~", "~1" is "/")',
            ),
          ),
      )
      .check(z.minLength(1), z.maxLength(16)),
    /** Requests that agree on the fields within this long of the first's answer are one key. */
    window: duration(),
  }),
);
type DeriveFields = ReturnType<typeof deriveFields>;

/**
 * `derive`: `true`, `false` or `{ fields, window }`. The table is checked on its own, so that
 * its errors name the field (`derive.window`) instead of a union's "invalid input".
 */
const derive = /* @__PURE__ */ lazy(
  () =>
    z.pipe(
      z.union([z.boolean(), z.looseObject({})], {
        error: 'must be true, false or { fields = ["/pointer"], window = "5m" }',
      }),
      z.transform((v: boolean | Record<string, unknown>, ctx) => {
        if (typeof v === "boolean") return v;
        const table = deriveFields().safeParse(v, { error: enLocale.localeError });
        if (table.success) return table.data;
        for (const i of table.error.issues)
          ctx.issues.push({ code: "custom", path: i.path, message: i.message, input: v });
        return z.NEVER;
      }),
    ) as unknown as z.ZodMiniType<boolean | z.output<DeriveFields>, boolean | z.input<DeriveFields>>,
);

function idempotencyFields() {
  return z
    .strictObject({
      /** Whose keys these are: `auto` (the caller's credential), or an identity (the key syntax of limits). Two principals never collide. */
      principal: principal(),
      /** A request without Idempotency-Key is a 400 problem. */
      required: z._default(z.boolean(), false),
      /**
       * `true`: without the header, derive the key from method, route, principal and the canonical
       * JSON body. `{ fields, window }`: the key is always the named body fields', whatever header comes.
       */
      derive: z._default(derive(), false),
      /** Top-level JSON body fields left out of the canonical body (timestamps, nonces). */
      ignore: z._default(z.array(z.string().check(z.minLength(1), z.maxLength(128))), []),
      /**
       * How long a claim holds unrenewed before another request may take it over. A live request
       * renews its claim until it is settled, so this bounds how long a holder that died blocks its
       * key, not the origin's run: shorter than the route's origin_timeout is fine. At least 1 s:
       * it is renewed every third of it, and a renewal must land before it runs out.
       */
      lease: z._default(duration(), 30_000),
      /** How long a completed answer is replayed (default a day; with `derive.fields`, the window). */
      ttl: z.optional(duration()),
      /** How often one principal may be answered with replays ("60/1m": 60 a minute, 60 at once); past it, 429. */
      replays: z.prefault(tierRate(), "60/1m"),
      /** Larger answers are marked completed without a stored body; duplicates get a 409 saying so. */
      max_body: z._default(z.int().check(z.minimum(0), z.maximum(10 * 1024 * 1024)), 1024 * 1024),
      /** A duplicate of an in-flight request waits up to this long for its answer (0: 409 at once). */
      wait: z.optional(duration()),
      /**
       * A 5xx from the origin, or a request it never got: release the claim (a retry runs again) or
       * hold it as indeterminate. An unknown outcome (a timeout with no late answer, a broken
       * connection) is always held.
       */
      on_origin_error: z._default(z.enum(["release", "hold"]), "release"),
      /** Methods the table applies to (GET and HEAD are safe to repeat). */
      methods: z._default(z.array(method()).check(z.minLength(1)), ["POST", "PUT", "PATCH", "DELETE"]),
      ...reconcileFields(),
    })
    .check(z.superRefine(ttlProblems));
}

/** A key derived from fields is kept its window: a `ttl` beside it would say otherwise. */
function ttlProblems(i: { derive: unknown; ttl?: number }, ctx: z.core.$RefinementCtx) {
  if (typeof i.derive === "object" && i.ttl !== undefined)
    ctx.addIssue({
      code: "custom",
      path: ["ttl"],
      message: "is derive.window for keys derived from fields (their answer is kept that long): leave ttl out",
    });
}

export const idempotencySettings = /* @__PURE__ */ lazy(() =>
  z
    .pipe(
      idempotencyFields(),
      z.transform((i: z.output<ReturnType<typeof idempotencyFields>>) => ({
        ...i,
        ...compiledPrincipal(i.principal),
        wait: i.wait ?? 0,
        ttl: i.ttl ?? (typeof i.derive === "object" ? i.derive.window : 86_400_000),
      })),
    )
    .check(
      z.superRefine((i, ctx) => {
        const what = typeof i.derive === "object" ? ["derive", "window"] : ["ttl"];
        const short = leaseProblem(i.lease);
        if (short) ctx.addIssue({ code: "custom", path: ["lease"], message: short });
        else if (i.lease >= i.ttl)
          ctx.addIssue({ code: "custom", path: ["lease"], message: `must be shorter than ${what.join(".")}` });
      }),
    ),
);
