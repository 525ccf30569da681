import type { IdempotencyView } from "./types.js";

const share = (v: number | null) => (v === null ? "—" : `${(v * 100).toFixed(1)}%`);
const ms = (v: number | null) => (v === null ? "—" : `${v.toFixed(1)} ms`);
/** A wait in the largest unit that keeps it readable: 45 s, 12 min, 3.5 h. */
const age = (v: number) =>
  v < 60_000
    ? `${Math.round(v / 1000)} s`
    : v < 3_600_000
      ? `${Math.round(v / 60_000)} min`
      : `${(v / 3_600_000).toFixed(1)} h`;

/**
 * Per idempotent route, over the hour: how many duplicates sluice answered without the origin
 * (the suppression rate), the share of keyed requests that were replays, and the first arrivals
 * that failed at the origin, with their latency; and, now, the keys left indeterminate (waiting
 * for reconciliation or an operator) and how long the oldest has waited. Not drawn when no route
 * has idempotency.
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
          <th>indeterminate now (oldest)</th>
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
      <IndeterminateCell row={r} />
      <td class="outcomes">{counted.length ? counted.map(([o, n]) => `${o} ${n}`).join(" · ") : "none"}</td>
    </tr>
  );
}

/** The keys indeterminate now and the oldest one's wait; "—" when they could not be read. */
function IndeterminateCell(props: { row: IdempotencyView }) {
  const i = props.row.indeterminate;
  if (!i) return <td class="indeterminate">—</td>;
  const oldest = i.oldest_ms === null ? "" : ` (${age(i.oldest_ms)})`;
  return <td class={i.waiting > 0 ? "indeterminate bad" : "indeterminate"}>{`${i.waiting}${oldest}`}</td>;
}
