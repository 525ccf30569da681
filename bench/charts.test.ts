import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  barChart,
  type BenchResults,
  chartsFromResults,
  escapeXml,
  niceTicks,
  runName,
  stepChart,
  svg,
} from "./charts.js";

const LATEST = JSON.parse(readFileSync(resolve("bench/results/latest.json"), "utf8")) as BenchResults & {
  [section: string]: unknown;
};

// ---------------------------------------------------------------------------------------------
// A small, strict XML reader: enough to say a chart is well-formed and to read its elements back

interface Node {
  name: string;
  attributes: Record<string, string>;
  children: Node[];
  /** The element's own text, entities decoded (not its children's). */
  text: string;
}

const NAMED: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

function decode(raw: string, where: number): string {
  return raw.replace(/&([^;&<]*);?/g, (whole, body: string) => {
    if (!whole.endsWith(";")) throw new Error(`a bare & at ${where}`);
    if (body in NAMED) return NAMED[body] as string;
    const code = /^#x[0-9a-f]+$/i.test(body)
      ? parseInt(body.slice(2), 16)
      : /^#\d+$/.test(body)
        ? Number(body.slice(1))
        : NaN;
    if (Number.isNaN(code)) throw new Error(`unknown entity &${body}; at ${where}`);
    return String.fromCodePoint(code);
  });
}

/** Throws on anything not well-formed: unbalanced or crossed tags, bare `<` or `&`, unquoted or repeated attributes. */
function parseXml(xml: string): Node {
  const root: Node = { name: "#document", attributes: {}, children: [], text: "" };
  const stack: Node[] = [root];
  let i = 0;
  const fail = (why: string): never => {
    throw new Error(`${why} at ${i}: ${JSON.stringify(xml.slice(Math.max(0, i - 40), i + 40))}`);
  };
  while (i < xml.length) {
    const parent = stack.at(-1) as Node;
    if (xml[i] !== "<") {
      const end = xml.indexOf("<", i);
      const raw = xml.slice(i, end === -1 ? xml.length : end);
      if (parent === root && raw.trim() !== "") fail("text outside the root");
      parent.text += decode(raw, i);
      i += raw.length;
    } else if (xml.startsWith("<!--", i)) {
      const end = xml.indexOf("-->", i);
      if (end === -1) fail("an unclosed comment");
      i = end + 3;
    } else if (xml.startsWith("</", i)) {
      const m = /^<\/([A-Za-z_][\w:.-]*)\s*>/.exec(xml.slice(i));
      if (!m) fail("a malformed end tag");
      if (stack.length === 1 || parent.name !== m?.[1]) fail(`</${m?.[1]}> closes <${parent.name}>`);
      stack.pop();
      i += m?.[0].length ?? 0;
    } else {
      const m = /^<([A-Za-z_][\w:.-]*)/.exec(xml.slice(i));
      if (!m) fail("a bare <");
      const node: Node = { name: m?.[1] ?? "", attributes: {}, children: [], text: "" };
      i += m?.[0].length ?? 0;
      for (;;) {
        const space = /^\s*/.exec(xml.slice(i))?.[0].length ?? 0;
        i += space;
        if (xml.startsWith("/>", i) || xml[i] === ">") break;
        if (space === 0) fail("no space before an attribute");
        const a = /^([A-Za-z_][\w:.-]*)\s*=\s*("([^"<]*)"|'([^'<]*)')/.exec(xml.slice(i));
        if (!a) fail("a malformed attribute");
        const name = a?.[1] ?? "";
        if (name in node.attributes) fail(`a repeated attribute ${name}`);
        node.attributes[name] = decode(a?.[3] ?? a?.[4] ?? "", i);
        i += a?.[0].length ?? 0;
      }
      if (parent === root && root.children.length > 0) fail("a second root element");
      parent.children.push(node);
      if (xml.startsWith("/>", i)) i += 2;
      else {
        i += 1;
        stack.push(node);
      }
    }
  }
  if (stack.length > 1) throw new Error(`<${stack.at(-1)?.name}> never closed`);
  const [top] = root.children;
  if (!top) throw new Error("no root element");
  return top;
}

function all(node: Node, name: string): Node[] {
  return [...(node.name === name ? [node] : []), ...node.children.flatMap((c) => all(c, name))];
}

const texts = (doc: Node) => all(doc, "text").map((t) => t.text);
const num = (node: Node, attribute: string) => Number(node.attributes[attribute]);

// ---------------------------------------------------------------------------------------------

describe("the charts of bench/results/latest.json", () => {
  const charts = chartsFromResults(LATEST);

  it("are all there, one per figure docs/benchmarks.md shows", () => {
    expect(charts.map((c) => c.name)).toEqual([
      "latency",
      "split",
      "split-per-second",
      "regions",
      "distance-latency",
      "distance-requests",
      "outage",
      "protect",
      "protect-latency",
    ]);
  });

  it.each(charts.map((c) => [c.name, c.svg] as const))("%s is a well-formed standalone SVG on white", (_, text) => {
    const doc = parseXml(text);
    expect(doc.name).toBe("svg");
    expect(doc.attributes.xmlns).toBe("http://www.w3.org/2000/svg");
    const [w, h] = [num(doc, "width"), num(doc, "height")];
    expect(w).toBeGreaterThan(0);
    expect(h).toBeGreaterThan(0);
    expect(doc.attributes.viewBox).toBe(`0 0 ${w} ${h}`);
    // the background: the first thing drawn, the whole picture, white
    const background = doc.children.find((c) => c.name === "rect");
    expect(background?.attributes).toMatchObject({ width: String(w), height: String(h), fill: "#ffffff" });
    expect(doc.children.indexOf(background as Node)).toBe(1);
    // the title, as the accessible name and as the visible heading
    const title = doc.children[0];
    expect(title?.name).toBe("title");
    expect(title?.text.length).toBeGreaterThan(10);
    expect(texts(doc)).toContain(title?.text);
    expect(texts(doc)).toContain(`npm run bench, run ${runName(LATEST)}`);
    // nothing drawn outside the picture
    for (const r of all(doc, "rect").filter((r) => "x" in r.attributes))
      expect(num(r, "x") + num(r, "width")).toBeLessThanOrEqual(w);
  });

  it("label every category and series of their sections", () => {
    const doc = (name: string) => parseXml(charts.find((c) => c.name === name)?.svg ?? "");
    const has = (name: string, labels: string[]) => {
      const shown = texts(doc(name));
      for (const label of labels) expect(shown, `${name}: ${label}`).toContain(label);
    };
    const l = LATEST.latency!;
    has("latency", ["sequential, median", "sequential, p99", "8 clients at once, median", "8 clients at once, p99"]);
    has("latency", ["limiting off", ...l.sequential.variants.filter((v) => v.key !== "off").map((v) => v.label)]);
    const split = LATEST.split!;
    has("split", [...Object.keys(split.scenario.demand), "offered"]);
    has(
      "split-per-second",
      split.variants.filter((v) => !v.cut_off).map((v) => v.short),
    );
    has(
      "regions",
      LATEST.regions!.steps.map((s) => `home Redis +${s.injected_ms} ms`),
    );
    const redis = LATEST.distance!.steps.map((s) =>
      s.injected_ms === 0 ? "Redis +0 ms" : `Redis +${s.injected_ms} ms (RTT +${s.effective_added_rtt_ms.toFixed(1)})`,
    );
    has("distance-latency", [...redis, "p50", "p99"]);
    has("distance-requests", redis);
    has(
      "outage",
      LATEST.outage!.runs.map(
        (r) => `${r.mode === "hang" ? "hung" : "refusing"}, ${r.policy}${r.policy === "local" ? " (default)" : ""}`,
      ),
    );
    has("outage", ["admitted (200)", "429", "5xx"]);
    const protect = LATEST.protect!;
    const caps = protect.options.limits.map((n) => `in-flight cap ${n}`);
    const shown = texts(doc("protect"));
    for (const cap of caps) expect(shown.some((t) => t.startsWith(cap))).toBe(true);
    has("protect", [
      "no limit",
      ...protect.cases.filter((c) => c.key.startsWith("adaptive")).map((c) => c.label),
      `origin capacity ${protect.capacity_per_s}/s`,
    ]);
    has("protect-latency", ["p50 of the 200s", "p99 of the 200s", "no 200s"]);
  });

  it("draw the protect goodput bars to scale against the origin's capacity line", () => {
    const doc = parseXml(charts.find((c) => c.name === "protect")?.svg ?? "");
    const bars = all(doc, "rect").filter((r) => r.attributes.class === "bar");
    const cases = LATEST.protect!.cases;
    expect(bars).toHaveLength(cases.length);
    const line = all(doc, "g")
      .find((g) => g.attributes.class === "marker")
      ?.children.find((c) => c.name === "line");
    const x0 = num(bars[0] as Node, "x");
    const capacityWidth = num(line as Node, "x1") - x0;
    bars.forEach((bar, i) => {
      const goodput = cases[i]?.goodput_per_s ?? NaN;
      expect(num(bar, "width") / capacityWidth).toBeCloseTo(goodput / LATEST.protect!.capacity_per_s, 3);
    });
  });

  it("skip the sections a run does not have", () => {
    expect(chartsFromResults({ name: "bench", started_at: "2026-11-23T14:47:42.443Z" })).toEqual([]);
    const older = chartsFromResults({ name: "bench", started_at: LATEST.started_at, latency: LATEST.latency });
    expect(older.map((c) => c.name)).toEqual(["latency"]);
  });
});

describe("barChart", () => {
  const hostile = `<script>&"`;

  it("escapes every label: a hostile one comes out as text", () => {
    const text = barChart({
      title: `${hostile} title`,
      subtitle: `a subtitle with ${hostile}`,
      categories: [hostile, "plain"],
      series: [
        { name: `${hostile} series`, colour: "#0072b2", values: [1, 2] },
        { name: "other", colour: "#e69f00", values: [null, 3] },
      ],
      unit: `${hostile} unit`,
      valueSuffix: ` ${hostile}`,
      missing: hostile,
      marker: { value: 2.5, label: `${hostile} marker` },
      source: `${hostile} source`,
    });
    expect(text).not.toContain("<script");
    expect(text).toContain("&lt;script&gt;&amp;&quot;");
    const doc = parseXml(text);
    const shown = texts(doc);
    for (const label of [
      `${hostile} title`,
      hostile,
      `${hostile} series`,
      `${hostile} unit`,
      `${hostile} marker`,
      `${hostile} source`,
    ])
      expect(shown).toContain(label);
    expect(shown).toContain(`1 ${hostile}`);
    expect(all(doc, "title").map((t) => t.text)).toContain(`${hostile} series, ${hostile}: 1 ${hostile}`);
  });

  it("draws bars whose lengths are proportional to their values, on the axis' scale", () => {
    const doc = parseXml(
      barChart({
        title: "proportional",
        categories: ["a", "b", "c", "d"],
        series: [
          { name: "first", colour: "#0072b2", values: [10, 20, 40, 0] },
          { name: "second", colour: "#e69f00", values: [5, null, 30, 0] },
        ],
        unit: "things",
      }),
    );
    const bars = all(doc, "rect").filter((r) => r.attributes.class === "bar");
    const widths = bars.map((b) => num(b, "width"));
    expect(widths).toHaveLength(7); // the null draws no bar
    const [a1, a2, b1, c1, c2, d1, d2] = widths as [number, number, number, number, number, number, number];
    expect(b1 / a1).toBeCloseTo(2, 2);
    expect(c1 / a1).toBeCloseTo(4, 2);
    expect(a2 / a1).toBeCloseTo(0.5, 2);
    expect(c2 / a1).toBeCloseTo(3, 2);
    expect([d1, d2]).toEqual([0, 0]);
    // against the axis: its last tick's gridline is where a bar of that value would end
    const axis = all(doc, "g").find((g) => g.attributes.class === "axis") as Node;
    const gridlines = axis.children.filter((c) => c.name === "line").map((c) => num(c, "x1"));
    const ticks = axis.children.filter((c) => c.name === "text").map((c) => Number(c.text));
    const top = ticks.at(-2) as number; // the last text is the unit's caption
    expect(ticks.slice(0, -1)).toEqual(niceTicks(40 * 1.04));
    const scale = ((gridlines.at(-1) as number) - (gridlines[0] as number)) / top;
    expect(c1).toBeCloseTo(40 * scale, 1);
    // every bar starts on the axis' zero, and bars of one category are stacked, not overlapping
    expect(new Set(bars.map((b) => num(b, "x")))).toEqual(new Set([gridlines[0]]));
    expect(num(bars[1] as Node, "y")).toBeGreaterThanOrEqual(
      num(bars[0] as Node, "y") + num(bars[0] as Node, "height"),
    );
  });

  it("keeps any label text exactly, and the document well-formed", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", maxLength: 30 }), fc.string({ maxLength: 30 }), (category, name) => {
        const doc = parseXml(
          barChart({
            title: name,
            categories: [category],
            series: [{ name, colour: "#0072b2", values: [1] }],
            unit: "u",
          }),
        );
        const shown = texts(doc);
        expect(shown).toContain(escapeFree(category));
        expect(all(doc, "title")[0]?.text).toBe(escapeFree(name));
      }),
    );
  });
});

/** What survives of a string in XML: the characters XML 1.0 forbids are dropped by escapeXml. */
function escapeFree(text: string): string {
  return [...text]
    .filter((c) => {
      const code = c.codePointAt(0) ?? 0;
      return !((code < 0x20 && !"\t\n\r".includes(c)) || code === 0xfffe || code === 0xffff);
    })
    .join("");
}

describe("stepChart", () => {
  it("draws each value as a step, on a linear scale, with the marker under the lines", () => {
    const doc = parseXml(
      stepChart({
        title: "steps",
        series: [
          { name: "up", colour: "#0072b2", values: [0, 50, 100] },
          { name: "<b>", colour: "#e69f00", values: [100, 100, 100], dash: "6 4" },
        ],
        xUnit: "second",
        unit: "per second",
        marker: { value: 100, label: "limit" },
      }),
    );
    const paths = all(doc, "path").filter((p) => p.attributes.class === "series");
    expect(paths.map((p) => all(p, "title")[0]?.text)).toEqual(["up", "<b>"]);
    const d = paths[0]?.attributes.d ?? "";
    expect(d).toMatch(/^M[\d.]+ [\d.]+H[\d.]+V[\d.]+H[\d.]+V[\d.]+H[\d.]+$/);
    const ys = [...d.matchAll(/(?:M[\d.]+ |V)([\d.]+)/g)].map((m) => Number(m[1]));
    expect((ys[0] as number) - (ys[1] as number)).toBeCloseTo((ys[1] as number) - (ys[2] as number), 1);
    const xs = [...d.matchAll(/H([\d.]+)/g)].map((m) => Number(m[1]));
    expect((xs[2] as number) - (xs[1] as number)).toBeCloseTo((xs[1] as number) - (xs[0] as number), 1);
    expect(paths[1]?.attributes["stroke-dasharray"]).toBe("6 4");
    // the marker's line at the same height as a value of 100, drawn before (under) the series
    const marker = all(doc, "g").find((g) => g.attributes.class === "marker") as Node;
    expect(num(marker.children[0] as Node, "y1")).toBeCloseTo(ys[2] as number, 1);
    const order = doc.children.find((c) => c.name === "g")?.children ?? [];
    expect(order.indexOf(marker)).toBeLessThan(order.indexOf(paths[0] as Node));
  });
});

describe("the markup helpers", () => {
  it("escape strings, keep markup, round numbers and refuse non-finite ones", () => {
    const inner = svg`<tspan>${"a<b"}</tspan>`;
    expect(svg`<text x="${1 / 3}">${inner}${["&", svg`<b/>`]}${null}${false}</text>`.text).toBe(
      '<text x="0.33"><tspan>a&lt;b</tspan>&amp;<b/></text>',
    );
    expect(() => svg`${NaN}`).toThrow();
    expect(escapeXml(`'"<>&\u0000\u0008ok\t`)).toBe("&#39;&quot;&lt;&gt;&amp;ok\t");
  });

  it("pick round ticks that reach the largest value", () => {
    expect(niceTicks(40)).toEqual([0, 10, 20, 30, 40]);
    expect(niceTicks(41.6)).toEqual([0, 10, 20, 30, 40, 50]);
    expect(niceTicks(1.04)).toEqual([0, 0.25, 0.5, 0.75, 1, 1.25]);
    expect(niceTicks(0)).toEqual([0, 1]);
    for (const max of [0.3, 7, 99, 240, 12_345]) {
      const ticks = niceTicks(max);
      expect(ticks.at(-1)).toBeGreaterThanOrEqual(max);
      expect(ticks.length).toBeLessThanOrEqual(8);
    }
  });
});
