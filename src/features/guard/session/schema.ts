import * as z from "zod/mini";
import { lazy } from "../../../config/lazy.js";
import { compiledPrincipal, duration, keyPart, method, principal } from "../../../config/primitives.js";
import { leaseProblem } from "../../../util/renewal.js";

export const sessionSettings = /* @__PURE__ */ lazy(() =>
  z.pipe(
    z.strictObject({
      /** Whose session: an identity in the key syntax of limits, e.g. "header:x-session-id" or "jwt:sid". */
      key: keyPart(),
      /**
       * Whose sessions these are (`auto`, or the key syntax of limits; missing parts fall back to the
       * IP): locks are per principal and session, so knowing another client's session id does not reach its lock.
       */
      principal: principal(),
      mode: z._default(z.literal("exclusive"), "exclusive"),
      /**
       * How long a grant holds unrenewed before the next request may take it over (at least 1 s:
       * a live call renews it every third of it).
       */
      lease: z._default(duration(), 30_000).check(
        z.superRefine((lease: number, ctx) => {
          const short = leaseProblem(lease);
          if (short) ctx.addIssue({ code: "custom", message: short, input: lease });
        }),
      ),
      /** How long a second call of a busy session waits for the lock (0: 409 at once). */
      wait: z.optional(duration()),
      /** Methods that take the lock (reads do not). */
      methods: z._default(z.array(method()).check(z.minLength(1)), ["POST", "PUT", "PATCH", "DELETE"]),
    }),
    z.transform((s) => ({
      ...s,
      ...compiledPrincipal(s.principal),
      wait: s.wait ?? 0,
    })),
  ),
);
