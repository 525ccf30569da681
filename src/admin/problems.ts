import { Hono } from "hono";
import { html } from "hono/html";
import type { HtmlEscapedString } from "hono/utils/html";
import { problem } from "../problem.js";
import { PROBLEMS } from "../problem-types.js";
import { PROBLEM_TYPES, type ProblemType } from "../problem-pages.js";
import { ConfigCache } from "../config/cache.js";
import type { Runtime } from "../runtime.js";
import type { AdminEnv } from "../operator/context.js";

/** Documentation, the same for everyone: a shared cache may keep it for a day. */
const CACHE = { "cache-control": "public, max-age=86400" };

/**
 * `GET /__sluice/problems/` and `GET /__sluice/problems/{type}`: the page a problem's `type` links
 * to under the default `problem_base` (RFC 9457 §3.1.1 suggests a type resolve to documentation
 * for people): what the problem means, what a client should do, which headers to read. Open to
 * anyone, token or not, as any client may be handed a problem; an unknown type is a 404 problem.
 * Rendered with `hono/html`, which escapes every value it interpolates.
 */
export function problemsApp(runtime: Runtime): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();
  app.get("/", (c) => c.html(layout("sluice · problem types", index()), 200, CACHE));
  app.get("/:type", (c) => {
    const type = PROBLEM_TYPES.get(c.req.param("type"));
    if (type) return c.html(layout(`${type.title} · sluice`, page(type)), 200, CACHE);
    // mounted before the guard, so the configuration is read here, only for the 404's own type
    const loaded = runtime.own(ConfigCache).of(c.env);
    const base = loaded.ok ? loaded.config.problem_base : undefined;
    return problem({ type: PROBLEMS.notFound, detail: "no such problem type" }, base);
  });
  return app;
}

function layout(title: string, body: HtmlEscapedString | Promise<HtmlEscapedString>) {
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${title}</title>
        <style>
          body {
            font:
              16px/1.5 system-ui,
              sans-serif;
            max-width: 42rem;
            margin: 2rem auto;
            padding: 0 1rem;
            color: #222;
          }
          code {
            background: #f2f2f2;
            padding: 0 0.2em;
          }
          dt {
            font-weight: 600;
            margin-top: 1rem;
          }
        </style>
      </head>
      <body>
        ${body}
      </body>
    </html>`;
}

function page(t: ProblemType) {
  return html`<h1>${t.title}</h1>
    <p>HTTP ${t.status.join(", ")} · <code>application/problem+json</code> (RFC 9457)</p>
    <dl>
      <dt>What it means</dt>
      <dd>${t.means}</dd>
      <dt>What to do</dt>
      <dd>${t.todo}</dd>
      <dt>What to read</dt>
      <dd>
        <ul>
          ${[...t.read, "detail (body): what happened to this request", "Sluice-Decision, Sluice-Region"].map(
            (r) => html`<li>${r}</li>`,
          )}
        </ul>
      </dd>
    </dl>
    <p><a href="/__sluice/problems">All problem types</a></p>`;
}

function index() {
  return html`<h1>Problem types</h1>
    <p>The problems sluice answers with, each an <code>application/problem+json</code> body (RFC 9457).</p>
    <ul>
      ${[...PROBLEM_TYPES].map(([slug, t]) => html`<li><a href="/__sluice/problems/${slug}">${t.title}</a> (${t.status.join(", ")})</li>`)}
    </ul>`;
}
