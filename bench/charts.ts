/**
 * The bench's figures as pictures (#15): hand-made SVG, no chart library, nothing fetched. Pure:
 * `chartsFromResults` turns the JSON `npm run bench` writes into `{ name, svg }` pairs and touches
 * nothing; `bench/chart-files.ts` writes them (from `bench/run.ts` and `npm run bench:charts`).
 *
 * Every chart is a standalone SVG (xmlns, width, height, viewBox) on a white rectangle, so that it
 * reads the same on GitHub's light and dark themes. All markup is built with the `svg` tag below,
 * which escapes every interpolated string: a label can hold `<`, `&` or quotes and stay text.
 */
import type { DistanceResult } from "./distance.js";
import type { LatencyResult } from "./latency.js";
import type { OutageResult } from "./outage.js";
import type { ProtectResult } from "./protect.js";
import type { RegionsResult } from "./regions.js";
import type { SplitResult } from "./split.js";

// ---------------------------------------------------------------------------------------------
// Markup: a tagged template that escapes what it is given, unless it is markup already

/** Markup made by `svg`: interpolated into another `svg` template as is. */
export class Markup {
  constructor(readonly text: string) {}
}

type Part = Markup | string | number | null | undefined | false | Part[];

const ENTITIES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Text for an SVG text node or attribute value; characters XML 1.0 does not allow at all are dropped. */
export function escapeXml(text: string): string {
  let out = "";
  for (const c of text) {
    const code = c.codePointAt(0) ?? 0;
    const forbidden = (code < 0x20 && c !== "\t" && c !== "\n" && c !== "\r") || code === 0xfffe || code === 0xffff;
    if (!forbidden) out += ENTITIES[c] ?? c;
  }
  return out;
}

function part(value: Part): string {
  if (value instanceof Markup) return value.text;
  if (Array.isArray(value)) return value.map(part).join("");
  if (value === null || value === undefined || value === false) return "";
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error(`chart: ${value} in the markup`);
    return String(Math.round(value * 100) / 100);
  }
  return escapeXml(value);
}

/** `svg\`<text>${label}</text>\``: strings are escaped, numbers rounded to 0.01, Markup kept. */
export function svg(strings: TemplateStringsArray, ...values: Part[]): Markup {
  let out = strings[0] ?? "";
  values.forEach((value, i) => (out += part(value) + (strings[i + 1] ?? "")));
  return new Markup(out);
}

// ---------------------------------------------------------------------------------------------
// Shared pieces: scale, frame, legend

/** Okabe-Ito: tells apart for most colour-blind readers, legible on white. */
export const COLOURS = {
  blue: "#0072b2",
  orange: "#e69f00",
  green: "#009e73",
  red: "#d55e00",
  sky: "#56b4e9",
  purple: "#cc79a7",
  grey: "#8c8c8c",
  ink: "#1f2328",
  muted: "#59636e",
  grid: "#e4e7eb",
} as const;

const FONT = "-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";
const PAD = 16;

/** A rough width of `text` in the sans-serif above: enough to lay out labels, not to typeset. */
export function textWidth(text: string, size: number): number {
  return [...text].length * size * 0.53;
}

/** 0 and 4 to 6 round steps up to at least `max` (1, 2, 2.5 or 5 × 10^k apart). */
export function niceTicks(max: number, target = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / target;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 2.5, 5, 10].find((m) => raw <= m * magnitude) ?? 10) * magnitude;
  const ticks: number[] = [];
  for (let k = 0; ticks.length === 0 || (ticks.at(-1) ?? 0) < max; k++) ticks.push(Number((k * step).toPrecision(12)));
  return ticks;
}

/** A value label: whole numbers from 100 up, three significant digits below. */
export function formatValue(value: number): string {
  return Math.abs(value) >= 100 ? String(Math.round(value)) : String(Number(value.toPrecision(3)));
}

export interface Series {
  name: string;
  colour: string;
  /** One per category; null: nothing to draw (the chart's `missing` text instead). */
  values: Array<number | null>;
}

/** A line across the plot at a value on the value axis (a capacity, a limit). */
export interface Marker {
  value: number;
  label: string;
}

interface FrameSpec {
  title: string;
  /** A sentence or two under the title, wrapped to the chart's width. */
  subtitle?: string;
  /** The run the figures come from, printed at the foot. */
  source?: string;
}

function legend(series: Array<{ name: string; colour: string; dash?: string }>, top: number, width: number) {
  const items: Markup[] = [];
  let x = PAD;
  let y = top;
  for (const s of series) {
    const w = 24 + textWidth(s.name, 12) + 18;
    if (x > PAD && x + w > width - PAD) [x, y] = [PAD, y + 20];
    const swatch = s.dash
      ? svg`<line x1="${x}" y1="${y - 4}" x2="${x + 16}" y2="${y - 4}" stroke="${s.colour}" stroke-width="3" stroke-dasharray="${s.dash}"/>`
      : svg`<rect x="${x}" y="${y - 10}" width="12" height="12" rx="2" fill="${s.colour}"/>`;
    items.push(svg`${swatch}<text x="${x + (s.dash ? 22 : 18)}" y="${y}" font-size="12">${s.name}</text>`);
    x += w;
  }
  return { markup: svg`<g class="legend">${items}</g>`, bottom: y + 10 };
}

/** `text` in lines of at most `width` (estimated), broken at spaces. */
export function wrap(text: string, width: number, size: number): string[] {
  const lines: string[] = [];
  for (const word of text.split(/\s+/).filter((w) => w !== "")) {
    const last = lines.at(-1);
    if (last !== undefined && textWidth(`${last} ${word}`, size) <= width) lines[lines.length - 1] = `${last} ${word}`;
    else lines.push(word);
  }
  return lines;
}

/** Title, subtitle lines and legend; where the plot may start. */
function header(spec: FrameSpec, series: Array<{ name: string; colour: string; dash?: string }>, width: number) {
  const lines = wrap(spec.subtitle ?? "", width - 2 * PAD, 12);
  const title = svg`<text x="${PAD}" y="28" font-size="16" font-weight="600">${spec.title}</text>`;
  const subtitle = lines.map(
    (line, i) => svg`<text x="${PAD}" y="${48 + i * 16}" font-size="12" fill="${COLOURS.muted}">${line}</text>`,
  );
  const top = 48 + lines.length * 16 + (lines.length > 0 ? 8 : -8);
  if (series.length < 2) return { markup: svg`${title}${subtitle}`, bottom: top };
  const key = legend(series, top + 12, width);
  return { markup: svg`${title}${subtitle}${key.markup}`, bottom: key.bottom + 4 };
}

function frame(spec: FrameSpec, width: number, height: number, body: Markup): string {
  const source = spec.source
    ? svg`<text x="${PAD}" y="${height - 12}" font-size="11" fill="${COLOURS.muted}">${spec.source}</text>`
    : null;
  return svg`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img">
<title>${spec.title}</title>
<rect width="${width}" height="${height}" fill="#ffffff"/>
<g font-family="${FONT}" fill="${COLOURS.ink}">
${body}
${source}
</g>
</svg>
`.text;
}

// ---------------------------------------------------------------------------------------------
// Grouped horizontal bars

export interface BarChartSpec extends FrameSpec {
  /** One group of bars per category, one bar per series, top to bottom. */
  categories: string[];
  series: Series[];
  /** The value axis' caption, with its unit. */
  unit: string;
  /** Printed after each value label (" ms"). */
  valueSuffix?: string;
  /** Printed where a value is null. */
  missing?: string;
  marker?: Marker;
  width?: number;
}

const BAR_GAP = 2;
const GROUP_GAP = 14;

interface BarLayout {
  x: (v: number) => number;
  x0: number;
  barHeight: number;
  /** Where the marker's line is, if any: a value label outside its bar must not cross it. */
  markerX: number | null;
  suffix: string;
  missing: string;
}

/** A grouped horizontal bar chart: categories down the side, bars from a value axis at 0. */
export function barChart(spec: BarChartSpec): string {
  const width = spec.width ?? 760;
  const head = header(spec, spec.series, width);
  const suffix = spec.valueSuffix ?? "";
  const values = spec.series.flatMap((s) => s.values.filter((v): v is number => v !== null));
  // 4% of headroom: a marker or the longest bar never sits on the plot's edge
  const ticks = niceTicks(Math.max(0, ...values, spec.marker?.value ?? 0) * 1.04);
  const axisMax = ticks.at(-1) ?? 1;
  const labelWidth = Math.min(320, Math.max(60, ...spec.categories.map((c) => textWidth(c, 12))));
  const valueRoom = Math.max(36, ...values.map((v) => textWidth(formatValue(v) + suffix, 11))) + 10;
  const x0 = PAD + labelWidth + 10;
  const plotWidth = width - PAD - valueRoom - x0;
  const n = spec.series.length;
  const barHeight = n > 2 ? 13 : 16;
  const groupHeight = n * barHeight + (n - 1) * BAR_GAP;
  const top = head.bottom + (spec.marker ? 22 : 8);
  const plotHeight = spec.categories.length * (groupHeight + GROUP_GAP);
  const x = (v: number) => x0 + (Math.max(0, v) / axisMax) * plotWidth;
  const layout: BarLayout = {
    x,
    x0,
    barHeight,
    markerX: spec.marker ? x(spec.marker.value) : null,
    suffix,
    missing: spec.missing ?? "no figure",
  };

  const groups = spec.categories.map((category, i) => {
    const y = top + GROUP_GAP / 2 + i * (groupHeight + GROUP_GAP);
    const bars = spec.series.map((s, j) =>
      bar(layout, s, s.values[i] ?? null, category, y + j * (barHeight + BAR_GAP)),
    );
    const label = svg`<text x="${x0 - 10}" y="${y + groupHeight / 2}" dy="0.35em" font-size="12" text-anchor="end">${category}</text>`;
    return svg`<g class="category">${label}${bars}</g>\n`;
  });
  const axis = valueAxis(ticks, x, { top, height: plotHeight, mid: x0 + plotWidth / 2 }, spec.unit);
  const m = spec.marker;
  const marker = m ? verticalMarker(m, x(m.value), top, plotHeight, x0 + plotWidth) : null;
  const height = top + plotHeight + 46 + (spec.source ? 18 : 0);
  return frame(spec, width, height, svg`${head.markup}\n${axis}\n${groups}${marker}`);
}

/** One bar with its value: the label after the bar's end, or inside it where it would cross the marker. */
function bar(l: BarLayout, s: Series, v: number | null, category: string, y: number): Markup {
  const mid = y + l.barHeight / 2;
  if (v === null) {
    return svg`<text x="${l.x0 + 4}" y="${mid}" dy="0.35em" font-size="11" font-style="italic" fill="${COLOURS.muted}">${l.missing}</text>`;
  }
  const end = l.x(v);
  const text = formatValue(v) + l.suffix;
  const room = textWidth(text, 11) + 8;
  const crosses = l.markerX !== null && l.markerX >= end && l.markerX <= end + room;
  const inside = crosses && end - l.x0 >= room;
  const label = inside
    ? svg`<text x="${end - 4}" y="${mid}" dy="0.35em" font-size="11" font-weight="600" text-anchor="end" fill="${inkOn(s.colour)}">${text}</text>`
    : svg`<text x="${end + 4}" y="${mid}" dy="0.35em" font-size="11">${text}</text>`;
  const tip = `${s.name}, ${category}: ${text}`;
  const rect = svg`<rect class="bar" x="${l.x0}" y="${y}" width="${end - l.x0}" height="${l.barHeight}" fill="${s.colour}">`;
  return svg`${rect}<title>${tip}</title></rect>${label}`;
}

/** White on a dark fill, ink on a light one (relative luminance of a #rrggbb colour). */
export function inkOn(colour: string): string {
  const channels = [1, 3, 5].map((i) => parseInt(colour.slice(i, i + 2), 16) / 255);
  const [r, g, b] = channels.map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4)) as [
    number,
    number,
    number,
  ];
  return 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.3 ? COLOURS.ink : "#ffffff";
}

function valueAxis(
  ticks: number[],
  x: (v: number) => number,
  plot: { top: number; height: number; mid: number },
  unit: string,
): Markup {
  const bottom = plot.top + plot.height;
  const lines = ticks.map((t) => {
    const stroke = t === 0 ? COLOURS.muted : COLOURS.grid;
    const line = svg`<line x1="${x(t)}" y1="${plot.top}" x2="${x(t)}" y2="${bottom}" stroke="${stroke}"/>`;
    return svg`${line}<text x="${x(t)}" y="${bottom + 14}" font-size="11" text-anchor="middle" fill="${COLOURS.muted}">${formatValue(t)}</text>`;
  });
  const caption = svg`<text x="${plot.mid}" y="${bottom + 32}" font-size="12" text-anchor="middle" fill="${COLOURS.muted}">${unit}</text>`;
  return svg`<g class="axis">${lines}${caption}</g>`;
}

function verticalMarker(m: Marker, at: number, top: number, h: number, right: number) {
  const anchor = at > right - 120 ? "end" : "start";
  const tx = anchor === "end" ? at - 4 : at + 4;
  return svg`<g class="marker"><line x1="${at}" y1="${top - 16}" x2="${at}" y2="${top + h}" stroke="${COLOURS.ink}" stroke-width="1.5" stroke-dasharray="5 4"/>
<text x="${tx}" y="${top - 6}" font-size="11" text-anchor="${anchor}">${m.label}</text></g>`;
}

// ---------------------------------------------------------------------------------------------
// Steps over time (per-second figures)

export interface LineSeries {
  name: string;
  colour: string;
  /** One value per step of the x axis (per second). */
  values: number[];
  /** stroke-dasharray, to tell apart series that overlap. */
  dash?: string;
}

export interface StepChartSpec extends FrameSpec {
  series: LineSeries[];
  /** The x axis' caption (each value covers [i, i + 1) of it). */
  xUnit: string;
  unit: string;
  marker?: Marker;
  width?: number;
}

/** Each series as a step line: value i held from x = i to x = i + 1. */
export function stepChart(spec: StepChartSpec): string {
  const width = spec.width ?? 760;
  const head = header(spec, spec.series, width);
  const steps = Math.max(1, ...spec.series.map((s) => s.values.length));
  // 10% of headroom: a line at the top value stays clear of the frame
  const yTicks = niceTicks(Math.max(0, ...spec.series.flatMap((s) => s.values), spec.marker?.value ?? 0) * 1.1);
  const xTicks = niceTicks(steps, 6);
  const yMax = yTicks.at(-1) ?? 1;
  const xMax = xTicks.at(-1) ?? steps;
  const x0 = PAD + Math.max(...yTicks.map((t) => textWidth(formatValue(t), 11))) + 8;
  const plotWidth = width - PAD - 12 - x0;
  const top = head.bottom + 22;
  const plotHeight = 220;
  const bottom = top + plotHeight;
  const x = (v: number) => x0 + (v / xMax) * plotWidth;
  const y = (v: number) => bottom - (Math.max(0, v) / yMax) * plotHeight;

  const muted = (tx: number, ty: number, anchor: string, text: string, size = 11) =>
    svg`<text x="${tx}" y="${ty}" font-size="${size}" text-anchor="${anchor}" fill="${COLOURS.muted}">${text}</text>`;
  const grid = [
    ...yTicks.map((t) => {
      const stroke = t === 0 ? COLOURS.muted : COLOURS.grid;
      const line = svg`<line x1="${x0}" y1="${y(t)}" x2="${x0 + plotWidth}" y2="${y(t)}" stroke="${stroke}"/>`;
      return svg`${line}${muted(x0 - 6, y(t) + 4, "end", formatValue(t))}`;
    }),
    ...xTicks.map((t) => muted(x(t), bottom + 14, "middle", formatValue(t))),
    muted(x0 + plotWidth / 2, bottom + 32, "middle", spec.xUnit, 12),
    muted(x0, top - 8, "start", spec.unit),
  ];
  const lines = spec.series.map((s, i) => {
    const d = s.values.map((v, k) => `${k === 0 ? `M${part(x(0))} ` : "V"}${part(y(v))}H${part(x(k + 1))}`);
    const stroke = svg`stroke="${s.colour}" stroke-width="${i === 0 ? 3 : 2}" stroke-dasharray="${s.dash ?? "none"}"`;
    return svg`<path class="series" d="${d.join("")}" fill="none" ${stroke}><title>${s.name}</title></path>\n`;
  });
  const m = spec.marker;
  // under the lines: a series at the marker's value stays visible
  const marker = m
    ? svg`<g class="marker"><line x1="${x0}" y1="${y(m.value)}" x2="${x0 + plotWidth}" y2="${y(m.value)}" stroke="${COLOURS.ink}" stroke-width="1.5" stroke-dasharray="5 4"/>
<text x="${x0 + plotWidth}" y="${y(m.value) - 8}" font-size="11" text-anchor="end">${m.label}</text></g>`
    : null;
  const height = bottom + 46 + (spec.source ? 18 : 0);
  return frame(spec, width, height, svg`${head.markup}\n<g class="axis">${grid}</g>\n${marker}\n${lines}`);
}

// ---------------------------------------------------------------------------------------------
// The bench's charts

/** What `chartsFromResults` reads of the bench JSON; sections missing from an older run are skipped. */
export interface BenchResults {
  name: string;
  started_at: string;
  latency?: LatencyResult;
  split?: SplitResult;
  regions?: RegionsResult;
  distance?: DistanceResult;
  outage?: OutageResult;
  protect?: ProtectResult;
}

export interface Chart {
  /** The file's name without `.svg`. */
  name: string;
  svg: string;
}

/** `bench-2026-11-23T14-47-42Z`: the run as `bench/run.ts` names its file. */
export function runName(result: Pick<BenchResults, "name" | "started_at">): string {
  const stamp = result.started_at.replace(/:/g, "-").replace(/\.\d+Z$/, "Z");
  return `${result.name}-${stamp}`;
}

/** Every chart the results have figures for, in the order of docs/benchmarks.md. */
export function chartsFromResults(result: BenchResults): Chart[] {
  const source = `npm run bench, run ${runName(result)}`;
  const charts: Chart[] = [];
  const add = (name: string, make: () => string) => charts.push({ name, svg: make() });
  const { latency, split, regions, distance, outage, protect } = result;
  if (latency) add("latency", () => latencyChart(latency, source));
  if (split) {
    add("split", () => splitChart(split, source));
    add("split-per-second", () => splitSecondsChart(split, source));
  }
  if (regions) add("regions", () => regionsChart(regions, source));
  if (distance) {
    add("distance-latency", () => distanceLatencyChart(distance, source));
    add("distance-requests", () => distanceRequestsChart(distance, source));
  }
  if (outage) add("outage", () => outageChart(outage, source));
  if (protect) {
    add("protect", () => protectChart(protect, source));
    add("protect-latency", () => protectLatencyChart(protect, source));
  }
  return charts;
}

const VARIANT_COLOURS = [COLOURS.grey, COLOURS.blue, COLOURS.orange, COLOURS.green, COLOURS.purple];

function latencyChart(l: LatencyResult, source: string): string {
  const c = l.concurrent;
  const stats: Array<{ label: string; pick: (key: string) => number | null }> = [];
  const from = (variants: typeof l.sequential.variants, field: "median_ms" | "p99_ms") => (key: string) =>
    variants.find((v) => v.key === key)?.latency[field] ?? null;
  stats.push({ label: "sequential, median", pick: from(l.sequential.variants, "median_ms") });
  stats.push({ label: "sequential, p99", pick: from(l.sequential.variants, "p99_ms") });
  if (c.variants.length > 0) {
    stats.push({ label: `${c.clients} clients at once, median`, pick: from(c.variants, "median_ms") });
    stats.push({ label: `${c.clients} clients at once, p99`, pick: from(c.variants, "p99_ms") });
  }
  return barChart({
    title: "Latency of an allowed request: limiting off vs sluice",
    subtitle: `${l.sequential.requests} sequential requests per variant, then ${c.requests} from ${c.clients} concurrent clients; every limit allows everything, so the difference is the cost of deciding (dispatchFetch wall time in Miniflare, Redis and origin on loopback).`,
    categories: stats.map((s) => s.label),
    series: l.sequential.variants.map((v, i) => ({
      name: v.key === "off" ? "limiting off" : v.label,
      colour: VARIANT_COLOURS[i % VARIANT_COLOURS.length] ?? COLOURS.grey,
      values: stats.map((s) => s.pick(v.key)),
    })),
    unit: "milliseconds",
    valueSuffix: " ms",
    source,
  });
}

function splitChart(sp: SplitResult, source: string): string {
  const regions = Object.keys(sp.scenario.demand);
  const steady = sp.variants.filter((v) => !v.cut_off);
  const perRegion = (v: (typeof steady)[number], field: "offered_per_s" | "admitted_per_s") =>
    regions.map((r) => v.regions.find((x) => x.region === r)?.[field] ?? null);
  const colours = [COLOURS.orange, COLOURS.blue, COLOURS.sky, COLOURS.green];
  const share = sp.scenario.rate / regions.length;
  return barChart({
    title: `One provider limit of ${sp.scenario.rate}/s across ${regions.length} regions: static split vs sluice's`,
    subtitle: `Deterministic simulation with the production share code, ${sp.scenario.seconds} s, burst ${sp.scenario.burst}; admitted per second once the first rebalance has taken effect. A static equal split caps every region at its quarter, whatever its demand.`,
    categories: regions,
    series: [
      { name: "offered", colour: COLOURS.grey, values: steady[0] ? perRegion(steady[0], "offered_per_s") : [] },
      ...steady.map((v, i) => ({
        name: `${v.short}: admitted`,
        colour: colours[i % colours.length] ?? COLOURS.blue,
        values: perRegion(v, "admitted_per_s"),
      })),
    ],
    unit: "requests per second",
    valueSuffix: "/s",
    marker: { value: share, label: `equal share ${formatValue(share)}/s` },
    source,
  });
}

function splitSecondsChart(sp: SplitResult, source: string): string {
  const steady = sp.variants.filter((v) => !v.cut_off);
  const colours = [COLOURS.orange, COLOURS.blue, COLOURS.sky];
  return stepChart({
    title: `Admitted per second, all regions together (provider limit ${sp.scenario.rate}/s)`,
    subtitle: `The same simulation second by second: offered ${Object.values(sp.scenario.demand).reduce((a, b) => a + b, 0)}/s in all. sluice's split reaches the limit after its first rebalance and never goes over it; the static split stays at what its quarters let through.`,
    series: steady.map((v, i) => ({
      name: v.short,
      colour: colours[i % colours.length] ?? COLOURS.blue,
      values: v.per_second,
      ...(i > 1 ? { dash: "6 4" } : {}),
    })),
    xUnit: "second of the run",
    unit: "admitted per second",
    marker: { value: sp.scenario.rate, label: `provider limit ${sp.scenario.rate}/s` },
    source,
  });
}

function regionsChart(rg: RegionsResult, source: string): string {
  const route = (key: "region" | "global", field: "median_ms" | "p99_ms") =>
    rg.steps.map((s) => s.routes.find((r) => r.key === key)?.latency[field] ?? null);
  return barChart({
    title: "A global limit vs a region one, the home Redis made far away",
    subtitle: `Requests from ${rg.from.continent}/${rg.from.colo}, ${rg.options.requests} sequential per route; latency injected in the home region's bridge. A central global decision pays one round trip to the home region; a regional one stays in eu.`,
    categories: rg.steps.map((s) => `home Redis +${s.injected_ms} ms`),
    series: [
      { name: "region scope, median", colour: COLOURS.blue, values: route("region", "median_ms") },
      { name: "region scope, p99", colour: COLOURS.sky, values: route("region", "p99_ms") },
      { name: "global scope, median", colour: COLOURS.red, values: route("global", "median_ms") },
      { name: "global scope, p99", colour: COLOURS.orange, values: route("global", "p99_ms") },
    ],
    unit: "milliseconds",
    valueSuffix: " ms",
    source,
  });
}

function distanceCategories(d: DistanceResult): string[] {
  return d.steps.map((s) =>
    s.injected_ms === 0 ? "Redis +0 ms" : `Redis +${s.injected_ms} ms (RTT +${s.effective_added_rtt_ms.toFixed(1)})`,
  );
}

function distanceLatencyChart(d: DistanceResult, source: string): string {
  const under = d.steps.map((s) => s.clients.find((c) => c.key === "under"));
  return barChart({
    title: "A client under its limit, with Redis further and further away",
    subtitle: `${under[0]?.label ?? "under its limit"}, ${d.options.rate} req/s for ${d.options.durationMs / 1000} s through ${d.isolates} isolates, default budget; latency of its allowed requests. The median stays put: most decisions are made from a lease in the isolate. The p99 is the round trip of the renewals.`,
    categories: distanceCategories(d),
    series: [
      { name: "p50", colour: COLOURS.blue, values: under.map((c) => c?.p50_ms ?? null) },
      { name: "p99", colour: COLOURS.orange, values: under.map((c) => c?.p99_ms ?? null) },
    ],
    unit: "milliseconds",
    valueSuffix: " ms",
    source,
  });
}

function distanceRequestsChart(d: DistanceResult, source: string): string {
  const client = (key: "under" | "over") =>
    d.steps.map((s) => s.clients.find((c) => c.key === key)?.redis_requests_per_decision ?? null);
  const label = (key: "under" | "over") =>
    d.steps[0]?.clients.find((c) => c.key === key)?.label ?? (key === "under" ? "under its limit" : "over its limit");
  return barChart({
    title: "Redis requests per decision, with Redis further away",
    subtitle: `HTTP requests carrying a script call for the client's route (decisions, lease renewals, give-backs) per decision, counted by a tap in front of the bridge. Below 1: decided in the isolate, from a lease or a known-closed bucket.`,
    categories: distanceCategories(d),
    series: [
      { name: `under: ${label("under")}`, colour: COLOURS.blue, values: client("under") },
      { name: `over: ${label("over")}`, colour: COLOURS.red, values: client("over") },
    ],
    unit: "Redis requests per decision",
    marker: { value: 1, label: "1 per decision" },
    source,
  });
}

function outageChart(o: OutageResult, source: string): string {
  const runs = [...o.runs].sort((a, b) => (a.mode === b.mode ? 0 : a.mode === "hang" ? -1 : 1));
  const sent = o.runs[0]?.requests ?? 0;
  return barChart({
    title: "Redis hung, then refusing connections, under each on_store_error",
    subtitle: `One client at ${o.options.rate} req/s for ${o.options.durationMs / 1000} s (${sent} requests) on ${o.limit.rate}/s burst ${o.limit.burst}, ${o.isolates} isolates. local holds each isolate to the limit's own figures, open lets everything through, closed refuses everything with a 503.`,
    categories: runs.map(
      (r) => `${r.mode === "hang" ? "hung" : "refusing"}, ${r.policy}${r.policy === "local" ? " (default)" : ""}`,
    ),
    series: [
      { name: "admitted (200)", colour: COLOURS.green, values: runs.map((r) => r.admitted) },
      { name: "of which degraded", colour: COLOURS.sky, values: runs.map((r) => r.degraded) },
      { name: "429", colour: COLOURS.orange, values: runs.map((r) => r.rejected_429) },
      { name: "5xx", colour: COLOURS.red, values: runs.map((r) => r.server_errors) },
    ],
    unit: `requests, of ${sent} sent`,
    source,
  });
}

function protectLabel(key: string, label: string, knee: number): string {
  const cap = /^fixed-(\d+)$/.exec(key)?.[1];
  if (cap === undefined) return label;
  const n = Number(cap);
  return `in-flight cap ${n}${n === knee ? " (the knee)" : n > knee ? " (above the knee)" : ""}`;
}

function protectSubtitle(p: ProtectResult): string {
  const m = p.model;
  return (
    `An origin with a queue: ${m.servers} servers of ${m.serviceMs} ms (${p.capacity_per_s} req/s at best), a 503 past ${m.knee} in flight; an open-loop load of ` +
    `${p.options.rate} req/s (twice its capacity) for ${p.options.durationMs / 1000} s per case, the adaptive cases after ${p.options.learnMs / 1000} s of learning from a cold start.`
  );
}

function protectChart(p: ProtectResult, source: string): string {
  return barChart({
    title: "Origin protection: goodput at twice the origin's capacity",
    subtitle: protectSubtitle(p),
    categories: p.cases.map((c) => protectLabel(c.key, c.label, p.model.knee)),
    series: [
      {
        name: "goodput (200s per second)",
        colour: COLOURS.blue,
        values: p.cases.map((c) => (c.available ? (c.goodput_per_s ?? null) : null)),
      },
    ],
    unit: "200s per second",
    valueSuffix: "/s",
    missing: "not in this build",
    marker: { value: p.capacity_per_s, label: `origin capacity ${p.capacity_per_s}/s` },
    source,
  });
}

function protectLatencyChart(p: ProtectResult, source: string): string {
  const knee = (p.model.serviceMs * p.model.knee) / p.model.servers;
  return barChart({
    title: "Origin protection: latency of the requests that got a 200",
    subtitle: protectSubtitle(p),
    categories: p.cases.map((c) => protectLabel(c.key, c.label, p.model.knee)),
    series: [
      { name: "p50 of the 200s", colour: COLOURS.sky, values: p.cases.map((c) => c.p50_ok_ms ?? null) },
      { name: "p99 of the 200s", colour: COLOURS.blue, values: p.cases.map((c) => c.p99_ok_ms ?? null) },
    ],
    unit: "milliseconds",
    valueSuffix: " ms",
    missing: "no 200s",
    marker: { value: knee, label: `origin at its knee (${p.model.knee} in flight): ${formatValue(knee)} ms` },
    source,
  });
}
