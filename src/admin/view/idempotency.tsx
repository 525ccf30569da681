import type { IdempotencyView } from "./types.js";

const share = (v: number | null) => (v === null ? "—" : `${(v * 100).toFixed(1)}%`);
const ms = (v: number | null) => (v === null ? "—" : `${v.toFixed(1)} ms`);

/**
 * Per idempotent route, over the hour: how many duplicates sluice answered without the origin
 * (the suppression rate), the share of keyed requests that were replays, and the first arrivals
 * that failed at the origin, with their latency. Not drawn when no route has idempotency.
 */
export function IdempotencyPanel(props: { rows: IdempotencyView[] | undefined }) {
  if (!props.rows?.length) return null;
  return (
    <div class="card" id="idempotency-panel">
      <h2>Idempotency, last hour</h2>
      <table id="idempotency">
        <tr>
          <th>route</th>
          <th>duplicates suppressed</th>
          <th>replay share</th>
          <th>first arrivals failed</th>
          <th>first arrival p50 / p99</th>
          <th>outcomes</th>
        </tr>
        {props.rows.map((r) => (
          <IdempotencyRow row={r} />
        ))}
      </table>
    </div>
  );
}

function IdempotencyRow(props: { row: IdempotencyView }) {
  const r = props.row;
  const counted = Object.entries(r.outcomes).filter(([, n]) => n > 0);
  return (
    <tr data-route={r.route}>
      <td>{r.route}</td>
      <td class={r.suppression_rate !== null && r.suppression_rate < 1 ? "suppression bad" : "suppression"}>
        {`${share(r.suppression_rate)} of ${r.duplicates}`}
      </td>
      <td class="replay-share">{share(r.replay_share)}</td>
      <td class={r.first_failures > 0 ? "first-failures bad" : "first-failures"}>
        {`${r.first_failures} of ${r.first_arrivals}`}
      </td>
      <td class="first-latency">{`${ms(r.first_p50_ms)} / ${ms(r.first_p99_ms)}`}</td>
      <td class="outcomes">{counted.length ? counted.map(([o, n]) => `${o} ${n}`).join(" · ") : "none"}</td>
    </tr>
  );
}
