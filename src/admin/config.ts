import { Hono } from "hono";
import type { AdminEnv } from "../operator/context.js";

/**
 * `GET /__sluice/config`: the effective configuration. Secrets are never in it: Upstash
 * credentials and the admin token are not part of the configuration, and credentials in
 * `ORIGIN_URL` and in routes' `divert_url` are removed.
 */
export function configApp(): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();
  app.get("/", (c) => {
    const config = c.get("config");
    // the compiled path matcher is no configuration an operator wrote; a divert URL may carry credentials too
    const routes = config.routes.map(({ pattern: _pattern, divertUrl, divertOn: _divertOn, ...r }) =>
      divertUrl ? { ...r, divert_url: withoutCredentials(divertUrl) } : r,
    );
    const originUrl = config.originUrl && withoutCredentials(config.originUrl);
    return c.json({
      ...config,
      originUrl,
      routes,
      secrets: "redacted: Upstash URLs and tokens, SLUICE_ADMIN_TOKEN and JWT secrets are never shown",
    });
  });
  return app;
}

/** An origin's URL without the user and password it may carry (`https://user:pass@api.example.com`). */
function withoutCredentials(url: URL): string {
  const origin = new URL(url.href);
  origin.username = "";
  origin.password = "";
  return origin.href;
}
