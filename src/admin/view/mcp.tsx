import type { McpToolView, McpView } from "./types.js";

const share = (v: number | null) => (v === null ? "—" : `${(v * 100).toFixed(1)}%`);
const ms = (v: number | null) => (v === null ? "—" : `${v.toFixed(1)} ms`);

/**
 * Per MCP route and tool, over the hour: how many guarded calls were repeats answered without a
 * run (the suppression rate), the share of them that were replays, the first runs that failed,
 * with their latency, and every outcome counted. Not drawn when no route has an `mcp` table.
 */
export function McpPanel(props: { rows: McpView[] | undefined }) {
  if (!props.rows?.length) return null;
  return (
    <div class="card" id="mcp-panel">
      <h2>MCP tools, last hour</h2>
      <table id="mcp">
        <tr>
          <th>route</th>
          <th>tool</th>
          <th>repeats suppressed</th>
          <th>replay share</th>
          <th>first runs failed</th>
          <th>first run p50 / p99</th>
          <th>outcomes</th>
        </tr>
        {props.rows.map((r) =>
          r.tools.length ? (
            r.tools.map((t) => <McpToolRow route={r.route} row={t} />)
          ) : (
            <tr data-route={r.route}>
              <td>{r.route}</td>
              <td colspan={6}>no calls</td>
            </tr>
          ),
        )}
      </table>
    </div>
  );
}

function McpToolRow(props: { route: string; row: McpToolView }) {
  const t = props.row;
  const counted = Object.entries(t.outcomes).filter(([, n]) => n > 0);
  return (
    <tr data-route={props.route} data-tool={t.tool}>
      <td>{props.route}</td>
      <td>{t.tool}</td>
      <td class="suppression">{`${share(t.suppression_rate)} of ${t.guarded}`}</td>
      <td class="replay-share">{share(t.replay_share)}</td>
      <td class={t.first_failures > 0 ? "first-failures bad" : "first-failures"}>
        {`${t.first_failures} of ${t.first_runs}`}
      </td>
      <td class="first-latency">{`${ms(t.first_p50_ms)} / ${ms(t.first_p99_ms)}`}</td>
      <td class="outcomes">{counted.length ? counted.map(([o, n]) => `${o} ${n}`).join(" · ") : "none"}</td>
    </tr>
  );
}
