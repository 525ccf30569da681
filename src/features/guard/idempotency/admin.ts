import { Hono } from "hono";
import { z } from "zod";
import { refFromHash } from "./record-ref.js";
import { resolve } from "./records.js";
import { asKeyHash } from "../../../identity/hash.js";
import { Problem } from "../../../problem.js";
import { PROBLEMS } from "../../../problem-types.js";
import { required, type AdminEnv } from "../../../operator/context.js";
import { BODILESS_STATUSES, badRequest, headerValue, jsonBody, replayableStatus } from "../../../operator/validate.js";
import { toBase64 } from "../../../util/base64.js";

const NO_HOME = "no Redis configured for the home region";

const resolveBody = z
  .object({
    route: z.string().min(1).max(63),
    key: z.string().regex(/^[0-9a-f]{32}$/, "must be a key hash as the ledger shows it"),
    action: z.enum(["release", "replay"]),
    status: replayableStatus.optional(),
    content_type: headerValue.optional(),
    body: z
      .string()
      .max(1024 * 1024)
      .optional(),
  })
  .strict();

/**
 * `POST /__sluice/idempotency/resolve`: an operator resolves an indeterminate key, by the hash the
 * ledger shows: `release` lets the next request run, `replay` answers duplicates with the given
 * `status`, `body` and `content_type`.
 */
export function idempotencyApp(): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();
  app.post("/resolve", jsonBody(resolveBody), async (c) => {
    const config = c.get("config");
    const b = c.req.valid("json");
    const route = config.routes.find((r) => r.name === b.route && r.idempotency);
    if (!route?.idempotency) {
      throw new Problem({ type: PROBLEMS.noSuchRoute, detail: `no route "${b.route}" with idempotency` });
    }
    if (b.action === "replay") checkReplayable(b, route.idempotency.methods);
    const store = required(c.get("stores").offPath(), PROBLEMS.storeUnavailable, NO_HOME);
    const ref = refFromHash(store, config.key_prefix, route.name, asKeyHash(b.key));
    const answer = b.action === "replay" ? replayAnswer(b, route.idempotency.ttl) : undefined;
    if (!(await resolve(ref, b.action, answer))) {
      throw new Problem({
        type: PROBLEMS.noSuchKey,
        detail: "nothing is recorded under that key (expired, or never claimed)",
      });
    }
    return c.json({ ok: true, route: route.name, key: b.key, action: b.action });
  });
  return app;
}

type ResolveBody = z.output<typeof resolveBody>;

/**
 * A `replay` answer every duplicate can be given: a body only where the status allows one (not
 * 204, 205 or 304), and not on a route whose keys are only ever HEAD requests (whose answers
 * have none). Anything else would be stored, then fail as a `500` on every duplicate for `ttl`.
 */
function checkReplayable(b: ResolveBody, methods: readonly string[]): void {
  if (!b.body) return;
  const status = b.status ?? 200;
  if (BODILESS_STATUSES.has(status)) throw badRequest(`body: a ${status} answer has no body`);
  if (methods.every((m) => m === "HEAD")) throw badRequest("body: answers to HEAD requests have no body");
}

/**
 * What duplicates are answered with after a `replay` resolution: the body's text as UTF-8 bytes,
 * stored as base64 as the gateway stores an origin's answer (so `€` is stored and `café` replayed
 * as they were given).
 */
function replayAnswer(b: ResolveBody, ttlMs: number) {
  const headers: Array<[string, string]> = [["content-type", b.content_type ?? "application/json"]];
  return { status: b.status ?? 200, headers, body: toBase64(new TextEncoder().encode(b.body ?? "")), ttlMs };
}
