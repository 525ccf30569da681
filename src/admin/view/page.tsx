import { raw } from "hono/html";
import type { Child } from "hono/jsx";
import { ALLOWED_COLOUR, SHED_COLOUR } from "./chart.js";
import { Panels } from "./panels.js";
import { PAGE_SCRIPT } from "./script.js";
import type { LimitChoice, PanelsData } from "./types.js";

/**
 * The admin pages, server-rendered with hono/jsx (which escapes every value it is given): the
 * login form, and the dashboard, whose panels (./panels.tsx) the page's one small script swaps
 * for fresh ones every few seconds. Styles and script are inline: the page loads nothing else.
 */

const STYLE = `
body{font:14px system-ui,sans-serif;background:#0f172a;color:#e2e8f0;margin:0;padding:1.5rem}
h1{margin:0}h2{font-size:1rem;margin:1.2rem 0 .5rem;color:#94a3b8}
header{display:flex;flex-wrap:wrap;gap:1rem;align-items:center;margin-bottom:1rem}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:1rem;margin-bottom:1rem}
.summary{grid-template-columns:repeat(auto-fit,minmax(180px,1fr))}
.card{background:#1e293b;border-radius:8px;padding:1rem}.card h2{margin-top:0}
.legend .swatch{display:inline-block;width:.8rem;height:.8rem;margin:0 .3rem 0 1rem;vertical-align:middle}
.swatch.allowed{background:${ALLOWED_COLOUR}}.swatch.shed{background:${SHED_COLOUR}}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #334155}
th{color:#94a3b8;font-weight:500}.ok{color:#4ade80}.bad{color:#f87171}
.verdict{display:inline-block;margin-right:.6rem}.verdict.allow{color:#4ade80}.verdict.reject{color:#f87171}
dl{display:grid;grid-template-columns:auto 1fr;gap:.2rem .8rem;margin:.6rem 0 0}dt{color:#94a3b8}dd{margin:0}
svg{display:block}svg .axis{fill:#94a3b8;font-size:9px}
form{display:flex;flex-wrap:wrap;gap:.4rem;align-items:center;margin:.3rem 0}
input,select,button{font:inherit;padding:.35rem;border-radius:4px;border:1px solid #475569;background:#0f172a;color:#e2e8f0}
button{background:#0ea5e9;border:0;color:#fff;cursor:pointer}button.secondary{background:#475569}
button:disabled{background:#334155;color:#64748b;cursor:not-allowed}.figure{font-size:1.6rem;font-weight:600}
.notice{color:#fbbf24}.notice ul{margin:0;padding-left:1.2rem}.window{color:#94a3b8;margin:0 0 .5rem}
`;

const LOGIN_STYLE = `
body{font:15px system-ui,sans-serif;background:#0f172a;color:#e2e8f0;display:grid;place-items:center;height:100vh;margin:0}
form{background:#1e293b;padding:2rem;border-radius:8px;display:grid;gap:.8rem;min-width:20rem}
input,button{font:inherit;padding:.5rem;border-radius:4px;border:1px solid #475569}
button{background:#0ea5e9;color:#fff;border:0;cursor:pointer}.bad{color:#f87171}
`;

function Document(props: { title: string; style: string; children?: Child }) {
  return (
    <>
      {raw("<!doctype html>")}
      <html lang="en">
        <head>
          <meta charset="utf-8" />
          <meta name="viewport" content="width=device-width, initial-scale=1" />
          <title>{props.title}</title>
          <style dangerouslySetInnerHTML={{ __html: props.style }} />
        </head>
        {props.children}
      </html>
    </>
  );
}

/** The sign-in form (`POST /__sluice/login`); `failed` says the last token was wrong. */
export function LoginPage(props: { failed?: boolean }) {
  return (
    <Document title="sluice · sign in" style={LOGIN_STYLE}>
      <body>
        <form method="post" action="/__sluice/login">
          <h1>sluice</h1>
          {props.failed ? <p class="bad">That token is not the admin token.</p> : null}
          <label>
            Admin token <input type="password" name="token" autocomplete="current-password" required />
          </label>
          <button type="submit">Sign in</button>
        </form>
      </body>
    </Document>
  );
}

/** The dashboard: the refreshed panels, and the forms, which stay put while the panels change. */
export function DashboardPage(props: { data: PanelsData; limits: LimitChoice[]; routes?: string[] }) {
  return (
    <Document title="sluice · dashboard" style={STYLE}>
      <body>
        <header>
          <h1>sluice</h1>
          <label>
            Ban for{" "}
            <select id="ban-ttl">
              <option value="10m">10 minutes</option>
              <option value="1h" selected>
                1 hour
              </option>
              <option value="1d">1 day</option>
            </select>
          </label>
          <span id="status" role="status"></span>
          <button type="button" id="sign-out" class="secondary">
            Sign out
          </button>
        </header>
        <div id="panels">
          <Panels data={props.data} />
        </div>
        <Forms limits={props.limits} routes={props.routes ?? []} />
        <script dangerouslySetInnerHTML={{ __html: PAGE_SCRIPT }} />
      </body>
    </Document>
  );
}

function Forms(props: { limits: LimitChoice[]; routes: string[] }) {
  return (
    <div class="grid">
      <div class="card">
        <h2>Add an override</h2>
        {props.limits.length === 0 ? <p class="notice">No limit of a served route to override.</p> : null}
        <form id="override-form">
          <select name="target" aria-label="route / limit">
            {props.limits.map((l) => (
              <option value={`${l.route}/${l.limit}`}>{`${l.route} / ${l.limit}`}</option>
            ))}
          </select>
          <input name="rate" type="number" min="1" placeholder="rate" required />
          <input name="ttl" value="10m" size={4} aria-label="for" />
          <input name="ip" placeholder="client IP (all if empty)" />
          <button type="submit">Add override</button>
        </form>
      </div>
      <div class="card">
        <h2>Deny a client or range</h2>
        <form id="deny-form">
          <input name="entry" placeholder="IP, CIDR or header:x-api-key=…" required />
          <input name="ttl" value="1h" size={4} aria-label="for" />
          <button type="submit">Deny</button>
        </form>
      </div>
      <ModeForm routes={props.routes} />
    </div>
  );
}

/** The degrade switch: force a route into a mode for a while (`PUT /__sluice/routes/{name}/mode`). */
function ModeForm(props: { routes: string[] }) {
  return (
    <div class="card">
      <h2>Switch a route's mode</h2>
      {props.routes.length === 0 ? (
        <p class="notice" id="no-modes">
          No route here has a mode to switch: route modes are applied by the gateway and sluice(), not by rateLimit().
        </p>
      ) : null}
      <form id="mode-form">
        <select name="route" aria-label="route">
          {props.routes.map((r) => (
            <option value={r}>{r}</option>
          ))}
        </select>
        <select name="mode" aria-label="mode">
          <option value="fallback">fallback</option>
          <option value="reject">reject (503)</option>
          <option value="divert">divert</option>
          <option value="open">open (skip limits)</option>
          <option value="normal">normal</option>
        </select>
        <input name="ttl" value="10m" size={4} aria-label="for" />
        <input name="note" placeholder="why" />
        <button type="submit">Apply</button>
      </form>
    </div>
  );
}

/** The login page, as `c.html` takes it. */
export const loginPage = (failed = false) => <LoginPage failed={failed} />;

/** The dashboard page, as `c.html` takes it. */
export const dashboardPage = (data: PanelsData, limits: LimitChoice[], routes: string[] = []) => (
  <DashboardPage data={data} limits={limits} routes={routes} />
);

/** The panels alone (`GET /__sluice/fragments/panels`), which the page's script swaps in. */
export const panelsFragment = (data: PanelsData) => <Panels data={data} />;
