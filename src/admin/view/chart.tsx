/** The colours the charts draw with (the browser test finds the bars by them). */
export const ALLOWED_COLOUR = "#4ade80";
export const SHED_COLOUR = "#f87171";

const W = 420;
const H = 130;
/** Room under the bars for the time axis. */
const AXIS = 14;
/** Room above the tallest bar for its figure. */
const TOP = 12;

/**
 * Allowed vs shed per minute as stacked bars (allowed below, shed on top), one bar a minute, the
 * tallest minute's total written over the chart and the time axis under it. Plain SVG: no chart
 * library, and nothing to load.
 */
export function Chart(props: { allowed: number[]; shed: number[] }) {
  const { allowed, shed } = props;
  const max = Math.max(1, ...allowed.map((a, i) => a + (shed[i] ?? 0)));
  const base = H - AXIS;
  return (
    <svg viewBox={`0 0 ${W} ${H}`} width="100%" role="img" aria-label="allowed and shed per minute">
      <line x1={0} y1={base + 0.5} x2={W} y2={base + 0.5} stroke="#475569" />
      {allowed.map((a, i) => (
        <Bar i={i} n={allowed.length} allowed={a} shed={shed[i] ?? 0} max={max} />
      ))}
      <text x={2} y={9} class="axis">
        {`${max} / min`}
      </text>
      <text x={2} y={H - 2} class="axis">
        −60 min
      </text>
      <text x={W - 2} y={H - 2} class="axis" text-anchor="end">
        now
      </text>
    </svg>
  );
}

/** Minute `i` of `n`: its allowed bar from the axis up, its shed bar on top of it. */
function Bar(props: { i: number; n: number; allowed: number; shed: number; max: number }) {
  const bw = W / Math.max(1, props.n);
  const scale = (v: number) => (v / props.max) * (H - AXIS - TOP);
  const [ha, hs, x, width] = [scale(props.allowed), scale(props.shed), props.i * bw, Math.max(bw - 1, 0.5)];
  return (
    <g>
      <rect class="bar-allowed" x={x} y={H - AXIS - ha} width={width} height={ha} fill={ALLOWED_COLOUR} />
      <rect class="bar-shed" x={x} y={H - AXIS - ha - hs} width={width} height={hs} fill={SHED_COLOUR} />
    </g>
  );
}
