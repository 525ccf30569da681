import type { QueueView } from "./types.js";

/** An age or a lag as an operator reads it: `850 ms`, `12 s`, `3 min 5 s`, `2 h 10 min`. */
function age(ms: number | null): string {
  if (ms === null) return "—";
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  const t = Math.round(ms / 1000);
  if (t < 60) return `${t} s`;
  if (t < 3600) return `${Math.floor(t / 60)} min${t % 60 ? ` ${t % 60} s` : ""}`;
  return `${Math.floor(t / 3600)} h${Math.floor(t / 60) % 60 ? ` ${Math.floor(t / 60) % 60} min` : ""}`;
}

/**
 * Per queue route: the backlog now (jobs waiting against `max_depth`, the oldest one's age) and
 * the hour's outcomes (shed by the bounds, dropped past `max_age`, delivered, failed) with the mean
 * delivery lag. Not drawn when no route sheds to a queue.
 */
export function QueuePanel(props: { rows: QueueView[] | undefined }) {
  if (!props.rows?.length) return null;
  return (
    <div class="card" id="queue-panel">
      <h2>Queues</h2>
      <table id="queues">
        <tr>
          <th>route</th>
          <th>waiting</th>
          <th>oldest job</th>
          <th>shed (full / too long)</th>
          <th>expired</th>
          <th>delivered / failed, last hour</th>
          <th>mean delivery lag</th>
        </tr>
        {props.rows.map((r) => (
          <QueueRow row={r} />
        ))}
      </table>
    </div>
  );
}

function QueueRow(props: { row: QueueView }) {
  const r = props.row;
  const full = r.max_depth !== null && r.depth !== null && r.depth >= r.max_depth;
  return (
    <tr data-route={r.route}>
      <td>{r.route}</td>
      <td class={full ? "depth bad" : "depth"}>
        {r.depth === null ? "—" : r.max_depth === null ? String(r.depth) : `${r.depth} of ${r.max_depth}`}
      </td>
      <td class="oldest">{age(r.oldest_age_ms)}</td>
      <td class={r.shed_depth + r.shed_age > 0 ? "shed bad" : "shed"}>{`${r.shed_depth} / ${r.shed_age}`}</td>
      <td class={r.expired > 0 ? "expired bad" : "expired"}>{String(r.expired)}</td>
      <td class="done">{`${r.delivered} / ${r.failed}`}</td>
      <td class="lag">{age(r.lag_mean_ms)}</td>
    </tr>
  );
}
