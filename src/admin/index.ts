import { Hono, type Context } from "hono";
import { z } from "zod";
import type { Config } from "../config/index.js";
import type { Env } from "../env.js";
import { configOf, stamp } from "../gateway.js";
import { LEDGER_MAXLEN, refFromHash, resolve } from "../idempotency/records.js";
import { allRegions, offPathStore } from "../region/index.js";
import { problem } from "../shed/problem.js";
import { clientIp } from "../keys/identify.js";
import { issueSession, sessionValid, tokenMatches } from "./auth.js";
import { beginAuthAttempt, throttledResponse } from "./throttle.js";
import { mountAdminRoutes, type AdminEnv } from "./routes.js";
import { dashboardData } from "./dashboard.js";
import { DASHBOARD_PAGE, LOGIN_PAGE } from "./page.js";



const resolveBody = z
  .object({
    route: z.string().min(1).max(63),
    key: z.string().regex(/^[0-9a-f]{32}$/, "must be a key hash as the ledger shows it"),
    action: z.enum(["release", "replay"]),
    status: z.number().int().min(100).max(599).optional(),
    content_type: z.string().max(200).optional(),
    body: z.string().max(1024 * 1024).optional(),
  })
  .strict();

/**
 * The admin API under `/__sluice/`: `health` answers anybody that sluice is up, and the operator
 * each region's Redis; everything else needs `Authorization: Bearer <SLUICE_ADMIN_TOKEN>`
 * (compared in constant time, failures throttled per client) or the dashboard's session, and the
 * whole API is off (404) when no token is configured. JSON in and out; errors are problems.
 */
export function adminApp(): Hono<AdminEnv> {
  const admin = new Hono<AdminEnv>().basePath("/__sluice");

  admin.use("*", async (c, next) => {
    const loaded = configOf(c.env);
    if (!loaded.ok) return stamp(problem({ status: 500, title: "Invalid sluice configuration", detail: loaded.error.message }), "reject", "unknown");
    c.set("config", loaded.config);
    c.set("authorised", false);
    const token = c.env.SLUICE_ADMIN_TOKEN;
    // health answers anybody that sluice is up (no Redis call); only the operator gets the regions
    const health = c.req.path === "/__sluice/health";
    if (health && (!token || !presentsCredential(c.req.raw.headers))) return next();
    if (!token) return problem({ status: 404, title: "Not found", detail: "the admin API is off: no SLUICE_ADMIN_TOKEN is set" });
    if (c.req.path === "/__sluice/login" || (c.req.path === "/__sluice" || c.req.path === "/__sluice/")) return next();
    // the dashboard's session: a signed cookie scoped to the admin path (HttpOnly, SameSite=Strict);
    // changes made with it still need a JSON body, which no cross-site form can send
    const bearer = c.req.header("authorization");
    if (!bearer && c.req.method !== "GET" && !(c.req.header("content-type") ?? "").startsWith("application/json")) {
      return problem({ status: 415, title: "JSON required", detail: "changes take a JSON body" });
    }
    const authorised = bearer ? await throttledCompare(c, () => tokenMatches(bearer, token)) : await sessionValid(sessionCookie(c.req.header("cookie")), token);
    if (authorised instanceof Response) return authorised;
    c.set("authorised", authorised);
    if (!authorised && !health) {
      return problem({ status: 401, title: "Unauthorized", detail: "the admin API needs Authorization: Bearer <SLUICE_ADMIN_TOKEN>", headers: { "WWW-Authenticate": 'Bearer realm="sluice"' } });
    }
    return next();
  });

  admin.get("/health", async (c) => {
    if (!c.get("authorised")) return c.json({ status: "up" });
    const config = c.get("config");
    const regions = await Promise.all(
      allRegions(config).map(async (name) => {
        const store = offPathStore(c.env, config, name);
        if (!store) return { region: name, reachable: false, error: "no Redis configured" };
        const started = Date.now();
        try {
          await store.redis.ping();
          return { region: name, reachable: true, rtt_ms: Date.now() - started };
        } catch {
          return { region: name, reachable: false, rtt_ms: Date.now() - started };
        }
      }),
    );
    const ok = regions.every((r) => r.reachable);
    return c.json({ ok, regions }, ok ? 200 : 503);
  });

  admin.get("/ledger", async (c) => {
    const config = c.get("config");
    const store = offPathStore(c.env, config);
    if (!store) return problem({ status: 503, title: "Ledger unavailable", detail: "no Redis configured for the home region" });
    const count = Math.min(LEDGER_MAXLEN, Math.max(1, Number(c.req.query("count") ?? 100) || 100));
    const entries = (await store.redis.xrevrange(`${config.key_prefix}:ledger`, "+", "-", count)) as unknown;
    return c.json({ entries: ledgerEntries(entries) });
  });

  admin.post("/idempotency/resolve", async (c) => {
    const config = c.get("config");
    const parsed = resolveBody.safeParse(await c.req.json().catch(() => undefined));
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      return problem({ status: 400, title: "Invalid request", detail: `${issue?.path.join(".") || "body"}: ${issue?.message ?? "not JSON"}` });
    }
    const b = parsed.data;
    const route = config.routes.find((r) => r.name === b.route && r.idempotency);
    if (!route?.idempotency) return problem({ status: 404, title: "No such route", detail: `no route "${b.route}" with idempotency` });
    const store = offPathStore(c.env, config);
    if (!store) return problem({ status: 503, title: "Store unavailable", detail: "no Redis configured for the home region" });
    const ref = refFromHash(store, config.key_prefix, route.name, b.key);
    const answer = b.action === "replay" ? { status: b.status ?? 200, headers: [["content-type", b.content_type ?? "application/json"]] as Array<[string, string]>, body: btoa(b.body ?? ""), ttlMs: route.idempotency.ttl } : undefined;
    if (!(await resolve(ref, b.action, answer))) return problem({ status: 404, title: "No such key", detail: "nothing is recorded under that key (expired, or never claimed)" });
    return c.json({ ok: true, route: route.name, key: b.key, action: b.action });
  });

  admin.get("/", async (c) => {
    const token = c.env.SLUICE_ADMIN_TOKEN as string;
    const signedIn = await sessionValid(sessionCookie(c.req.header("cookie")), token);
    return c.html(signedIn ? DASHBOARD_PAGE : LOGIN_PAGE, 200, { "cache-control": "no-store" });
  });

  admin.post("/login", async (c) => {
    const form = await c.req.parseBody().catch(() => ({}) as Record<string, unknown>);
    const given = typeof form.token === "string" ? form.token : "";
    const matches = await throttledCompare(c, () => tokenMatches(`Bearer ${given}`, c.env.SLUICE_ADMIN_TOKEN as string));
    if (matches instanceof Response) return matches;
    if (!matches) return c.html(LOGIN_PAGE, 401);
    const secure = new URL(c.req.url).protocol === "https:" ? "; Secure" : "";
    const session = await issueSession(c.env.SLUICE_ADMIN_TOKEN as string);
    return new Response(null, {
      status: 303,
      headers: { location: "/__sluice/", "set-cookie": `${SESSION}=${session.value}; Path=/__sluice; HttpOnly; SameSite=Strict; Max-Age=${session.maxAgeS}${secure}` },
    });
  });

  admin.get("/api/dashboard", async (c) => c.json(await dashboardData(c.get("config"), c.env)));

  mountAdminRoutes(admin);
  admin.all("*", () => problem({ status: 404, title: "Not found", detail: "no such admin route" }));
  return admin;
}

const SESSION = "sluice_admin";

/**
 * Compares a presented token under the failure throttle: a client over the limit gets the 429
 * before anything is compared; a success never counts. Dashboard session cookies are not
 * throttled: they are HMAC-signed (nothing to guess), and an expired one must not lock its
 * operator out.
 */
async function throttledCompare(c: Context<AdminEnv>, compare: () => Promise<boolean>): Promise<boolean | Response> {
  const config = c.get("config");
  const attempt = await beginAuthAttempt(offPathStore(c.env, config), config.key_prefix, clientIp(c.req.raw.headers));
  if (attempt.retryAfterMs > 0) return throttledResponse(attempt.retryAfterMs);
  const matches = await compare();
  await attempt.settle(matches);
  return matches;
}

/** A bearer token or a session cookie, right or wrong: what health checks before saying more. */
function presentsCredential(headers: Headers): boolean {
  return Boolean(headers.get("authorization")) || sessionCookie(headers.get("cookie") ?? undefined) !== undefined;
}

function sessionCookie(cookie: string | undefined): string | undefined {
  return new RegExp(`(?:^|;\\s*)${SESSION}=([^;]*)`).exec(cookie ?? "")?.[1];
}

/** XREVRANGE as the client gives it without deserialisation: [[id, [field, value, ...]], ...]. */
function ledgerEntries(reply: unknown): Array<Record<string, string>> {
  if (!Array.isArray(reply)) return Object.entries((reply ?? {}) as Record<string, Record<string, string>>).map(([id, fields]) => ({ id, ...fields }));
  return reply.map((entry) => {
    const [id, fields] = entry as [string, string[]];
    const out: Record<string, string> = { id: String(id) };
    for (let i = 0; i + 1 < fields.length; i += 2) out[String(fields[i])] = String(fields[i + 1]);
    return out;
  });
}
