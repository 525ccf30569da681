import * as z from "zod/mini";
import { lazy } from "../../config/lazy.js";
import { duration } from "../../config/primitives.js";

/** The longest a `ban` counts refusals over, and the longest one ban lasts. */
const MAX_BAN_WITHIN_MS = 86_400_000;
const MAX_BAN_MS = 365 * 86_400_000;

/**
 * Escalating bans (docs/operating.md, Bans): a client this limit refuses `after` times within `within` goes
 * on the deny list for the first of `for`, each repeat ban for the next (the last repeats), so a
 * ban never gets shorter. A limit's own table, so it stands with the limit's schema; the lists
 * write the bans (src/features/access/bans.ts, handed each refusal where the steps are composed).
 */
export const banSettings = /* @__PURE__ */ lazy(() =>
  z
    .strictObject({
      after: z.int().check(z.minimum(1), z.maximum(1_000_000)),
      within: duration().check(z.refine((ms) => ms <= MAX_BAN_WITHIN_MS, "must be at most 1d")),
      for: z
        .array(duration().check(z.refine((ms) => ms <= MAX_BAN_MS, "must be at most 365d")))
        .check(z.minLength(1), z.maxLength(16)),
    })
    .check(
      z.superRefine((b, ctx) => {
        b.for.forEach((ms, i) => {
          if (i > 0 && ms < (b.for[i - 1] as number))
            ctx.addIssue({ code: "custom", path: ["for", i], message: "must be at least the duration before it" });
        });
      }),
    ),
);

/** The key parts a ban can name as a deny-list entry: one per client, never everybody or a path. */
export const bannable = (key: string[]) => key.length === 1 && key[0] !== "global" && key[0] !== "path";
