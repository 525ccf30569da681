import { banWarning } from "./ban.js";
import { Chart } from "./chart.js";
import { IdempotencyPanel } from "./idempotency.js";
import { McpPanel } from "./mcp.js";
import { QueuePanel } from "./queue.js";
import type {
  BlockedView,
  HealthRow,
  ListRow,
  OverrideRow,
  PanelsData,
  RegionView,
  RouteRow,
  RouteView,
} from "./types.js";

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const ms = (v: number | null | undefined) => (v === null || v === undefined ? "—" : `${v.toFixed(1)} ms`);
const percent = (share: number) => `${Math.round(share * 100)}%`;
/** A rate per second with two significant digits below 10 (`0.027`, `2.5`), whole above. */
const perSecond = (n: number) => (n >= 10 ? n.toFixed(0) : String(Number(n.toPrecision(2))));

/** A duration in seconds as an operator reads it: `0 s`, `45 s`, `12 min 5 s`, `3 h 10 min`. */
export function seconds(s: number): string {
  const t = Math.round(s);
  if (t < 60) return `${t} s`;
  if (t < 3600) return `${Math.floor(t / 60)} min${t % 60 ? ` ${t % 60} s` : ""}`;
  return `${Math.floor(t / 3600)} h${Math.floor(t / 60) % 60 ? ` ${Math.floor(t / 60) % 60} min` : ""}`;
}

/**
 * Everything the page refreshes every few seconds, server-rendered: the totals, the regions, one
 * panel per route, the top refused clients and the lists and overrides in force. The page and
 * `GET /__sluice/fragments/panels` render this same component.
 */
export function Panels(props: { data: PanelsData }) {
  const { dashboard, lists, overrides, health } = props.data;
  const allowed = sum(dashboard.routes.map((r) => sum(r.allowed)));
  const shed = sum(dashboard.routes.map((r) => sum(r.shed)));
  return (
    <div id="panels-body">
      {props.data.unavailable?.length ? (
        <p class="card bad" id="unavailable">{`Could not read ${props.data.unavailable.join(", ")}: shown empty.`}</p>
      ) : null}
      <Notices notices={dashboard.notices} />
      <div class="grid summary">
        <Figure id="fig-allowed" title="Allowed, last hour" value={allowed} />
        <Figure id="fig-shed" title="Shed, last hour" value={shed} />
        <Figure id="fig-routes" title="Routes" value={dashboard.routes.length} />
        <Figure id="fig-denied" title="Deny entries in force" value={lists.filter((e) => e.kind === "deny").length} />
      </div>
      <RegionPanel regions={dashboard.regions} health={health} />
      <IdempotencyPanel rows={dashboard.idempotency} />
      <McpPanel rows={dashboard.mcp} />
      <QueuePanel rows={dashboard.queues} />
      <h2>
        Routes: allowed vs shed, last 60 minutes <Legend />
      </h2>
      <div class="grid" id="charts">
        {dashboard.routes.map((r) => (
          <RoutePanel route={r} />
        ))}
      </div>
      <div class="grid">
        <TopRefused rows={dashboard.top_blocked} lists={lists} />
        <ListsTable rows={lists} />
        <OverridesTable rows={overrides} />
        {props.data.modes ? <RouteModesTable rows={props.data.modes} /> : null}
      </div>
    </div>
  );
}

/** What the operator must know to read the page right (a route no middleware serves, routes not shown). */
export function Notices(props: { notices: string[] | undefined }) {
  if (!props.notices?.length) return null;
  return (
    <div class="card notice" id="notices">
      <ul>
        {props.notices.map((n) => (
          <li>{n}</li>
        ))}
      </ul>
    </div>
  );
}

function Figure(props: { id: string; title: string; value: number }) {
  return (
    <div class="card">
      {props.title}
      <div class="figure" id={props.id}>
        {props.value}
      </div>
    </div>
  );
}

function Legend() {
  return (
    <span class="legend">
      <span class="swatch allowed"></span>allowed<span class="swatch shed"></span>shed
    </span>
  );
}

/** One row per region: what its isolates decided per second, how far its Redis is, how much they decided alone. */
export function RegionPanel(props: { regions: RegionView[] | undefined; health: HealthRow[] }) {
  const names = [...new Set([...(props.regions ?? []).map((r) => r.region), ...props.health.map((h) => h.region)])];
  const recent = recentWindow(props.regions);
  return (
    <div class="card" id="region-panel">
      <h2>Regions</h2>
      <p class="window" id="region-window">
        {`Rates are means per second over ${recent}; round trips and the local share are of the same ${recent}; degraded time is of the last hour.`}
      </p>
      <table id="regions">
        <tr>
          <th>region</th>
          <th>{`decisions/s by verdict, mean of ${recent}`}</th>
          <th>{`Redis RTT p50 / p99, ${recent}`}</th>
          <th>{`local (leased), ${recent}`}</th>
          <th>degraded, last hour</th>
          <th>Redis now</th>
        </tr>
        {names.map((name) => (
          <RegionRow
            name={name}
            figures={props.regions?.find((r) => r.region === name)}
            health={props.health.find((h) => h.region === name)}
          />
        ))}
      </table>
    </div>
  );
}

/** The window the region figures are over, as the figures name it (the current minute counts as far as it has gone). */
function recentWindow(regions: RegionView[] | undefined): string {
  const minutes = regions?.find((r) => r.window_minutes !== undefined)?.window_minutes ?? 5;
  return `the last ${minutes} minutes`;
}

function RegionRow(props: { name: string; figures: RegionView | undefined; health: HealthRow | undefined }) {
  const { name, figures: f, health: h } = props;
  const verdicts = Object.entries(f?.per_second ?? {}).filter(([, n]) => n > 0);
  return (
    <tr data-region={name}>
      <td>{name}</td>
      <td class="verdicts">
        {verdicts.length === 0
          ? f
            ? "idle"
            : "—"
          : verdicts.map(([verdict, n]) => (
              <span class={`verdict ${verdict}`}>
                {verdict} {perSecond(n)}/s
              </span>
            ))}
      </td>
      <td class="rtt">{f ? `${ms(f.rtt_p50_ms)} / ${ms(f.rtt_p99_ms)}` : "—"}</td>
      <td class="local-share">{f ? percent(f.local_share) : "—"}</td>
      <td class={f && f.degraded_seconds > 0 ? "degraded bad" : "degraded"}>{f ? seconds(f.degraded_seconds) : "—"}</td>
      <td class={h?.reachable ? "ok" : "bad"}>
        {h ? (h.reachable ? `reachable, ${h.rtt_ms ?? "?"} ms${clockNote(h)}` : "unreachable") : "—"}
      </td>
    </tr>
  );
}

/** Said beside a reachable Redis that refuses TIME in scripts: its decisions run on the isolates' clocks. */
function clockNote(h: HealthRow): string {
  return h.clock?.mode === "isolate" ? ", TIME refused: isolate clock" : "";
}

/** What the metrics name in a limit's place when no limit decided (`-`: allowed by all) or something else refused. */
const NOT_LIMITS = new Set(["-", "breaker", "deny-list"]);

/**
 * The limit closest to exhaustion: the one that shed the largest share of the route's requests over
 * the hour (each limit's shed over all the route's decisions; a tie goes to the one that shed more).
 * None when no limit shed anything.
 */
export function closestToExhaustion(limits: RouteView["limits"]): { limit: string; share: number } | undefined {
  const all = limits ?? [];
  const total = all.reduce((n, l) => n + l.allowed + l.shed, 0);
  let best: { limit: string; share: number; shed: number } | undefined;
  for (const l of all) {
    if (NOT_LIMITS.has(l.limit) || l.shed === 0) continue;
    const share = l.shed / total;
    if (!best || share > best.share || (share === best.share && l.shed > best.shed))
      best = { limit: l.limit, share, shed: l.shed };
  }
  return best && { limit: best.limit, share: best.share };
}

/** A route's hour: the chart, its totals, the limit closest to exhaustion, its bans and its adaptive limits. */
export function RoutePanel(props: { route: RouteView }) {
  const r = props.route;
  const closest = closestToExhaustion(r.limits);
  return (
    <div class="card chart" data-route={r.route}>
      <strong>{r.route}</strong> <span class="totals">{`${sum(r.allowed)} allowed · ${sum(r.shed)} shed`}</span>
      {r.unserved ? <p class="unserved notice">{r.unserved}</p> : null}
      <Chart allowed={r.allowed} shed={r.shed} />
      <dl>
        <dt>closest to exhaustion</dt>
        <dd class="closest">
          {closest ? `${closest.limit}: ${percent(closest.share)} shed` : r.limits ? "nothing shed" : "—"}
        </dd>
        <dt>bans, last hour</dt>
        <dd class="bans">{r.bans ?? "—"}</dd>
        {r.adaptive?.length ? (
          <>
            <dt>adaptive limit</dt>
            <dd class="adaptive">
              {r.adaptive.map((a) => (
                <div>{`${a.region}: ${a.in_flight ?? "—"} of ${a.limit} in flight (origin ${ms(a.latency_ms)}, base ${ms(a.base_ms)})`}</div>
              ))}
            </dd>
          </>
        ) : null}
      </dl>
    </div>
  );
}

/** The clients refused most over the hour, by label where sluice keeps one, each with its ban (or lift). */
export function TopRefused(props: { rows: BlockedView[]; lists: ListRow[] }) {
  const denied = new Set(props.lists.filter((e) => e.kind === "deny").map((e) => e.entry));
  return (
    <div class="card">
      <h2>Top refused clients, last hour</h2>
      <table id="blocked">
        <tr>
          <th>route</th>
          <th>client</th>
          <th>refusals</th>
          <th></th>
        </tr>
        {props.rows.map((b) => (
          <tr data-id={b.id} data-label={b.label}>
            <td>{b.route}</td>
            <td class="client" title={b.id}>
              {b.label ? b.label : <code>{`${b.id.slice(0, 12)}…`}</code>}
            </td>
            <td>{b.refusals}</td>
            <td>
              <BanAction entry={b.entry} label={b.label} denied={b.entry !== undefined && denied.has(b.entry)} />
            </td>
          </tr>
        ))}
      </table>
    </div>
  );
}

/**
 * A row's ban (or lift): a ban asks first, saying what the entry denies (a masked label's entry is
 * the client's whole /24 or /48: ./ban.ts) and, from the page's script, for how long and the
 * request it will send. A row with no entry (an API key, the global bucket) cannot be banned.
 */
function BanAction(props: { entry: string | undefined; label: string | undefined; denied: boolean }) {
  if (props.entry === undefined)
    return (
      <button
        type="button"
        disabled
        title={
          props.label === "global"
            ? "the global bucket is every client's: there is no one client to ban"
            : "sluice keeps no deny entry for this client"
        }
      >
        Ban
      </button>
    );
  if (props.denied)
    return (
      <button type="button" class="secondary" data-action="lift" data-kind="deny" data-entry={props.entry}>
        Unban
      </button>
    );
  return (
    <button type="button" data-action="ban" data-entry={props.entry} data-confirm={banWarning(props.entry)}>
      {props.entry.includes("/") ? "Ban range" : "Ban"}
    </button>
  );
}

/** The deny and allow entries in force (bans included), each of which can be lifted early. */
export function ListsTable(props: { rows: ListRow[] }) {
  return (
    <div class="card">
      <h2>Deny and allow lists</h2>
      <table id="lists">
        {props.rows.length === 0 ? (
          <tr>
            <td>none</td>
          </tr>
        ) : (
          props.rows.map((e) => (
            <tr data-entry={e.entry} data-kind={e.kind}>
              <td>{e.kind}</td>
              <td>{e.entry}</td>
              <td>{`until ${e.expires_at}`}</td>
              <td>{e.note ?? ""}</td>
              <td>
                <button type="button" class="secondary" data-action="lift" data-kind={e.kind} data-entry={e.entry}>
                  {e.kind === "deny" ? "Lift ban early" : "Remove"}
                </button>
              </td>
            </tr>
          ))
        )}
      </table>
    </div>
  );
}

/** The overrides in force: route, limit, whom (one client or all), the rate and until when. */
export function OverridesTable(props: { rows: OverrideRow[] }) {
  return (
    <div class="card">
      <h2>Overrides</h2>
      <table id="overrides">
        {props.rows.length === 0 ? (
          <tr>
            <td>none</td>
          </tr>
        ) : (
          props.rows.map((o) => (
            <tr data-route={o.route}>
              <td>{o.route}</td>
              <td>{`${o.field.split(":")[0] ?? ""} (${o.field.endsWith(":*") ? "all" : "one client"})`}</td>
              <td>{`${o.rate} / ${o.period_ms} ms`}</td>
              <td>{`until ${o.expires_at}`}</td>
            </tr>
          ))
        )}
      </table>
    </div>
  );
}

/** Every route's degrade switch: `normal`, or the mode forced until when, by whom and why, with its way back. */
export function RouteModesTable(props: { rows: RouteRow[] }) {
  return (
    <div class="card">
      <h2>Route modes</h2>
      <table id="route-modes">
        {props.rows.map((m) => (
          <tr data-route={m.name} data-mode={m.mode}>
            <td>{m.name}</td>
            <td class={m.mode === "normal" ? "ok" : "bad"}>{m.mode}</td>
            <td>{m.expires_at ? `until ${m.expires_at}` : ""}</td>
            <td>{[m.by, m.note].filter(Boolean).join(": ")}</td>
            <td>
              {m.mode === "normal" ? null : (
                <button type="button" class="secondary" data-action="normal" data-route={m.name}>
                  Back to normal
                </button>
              )}
            </td>
          </tr>
        ))}
      </table>
    </div>
  );
}
