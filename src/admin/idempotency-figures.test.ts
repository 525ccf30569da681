/**
 * The idempotency figures on their own: the outcome counter and the first-arrival histogram as the
 * metrics buffer writes them, the Prometheus text read back from the all-time hash, the dashboard's
 * rates, the `traceparent` check, and the ledger query's paging and filters.
 */
import { describe, expect, it } from "vitest";
import { matching } from "./ledger-query.js";
import fc from "fast-check";
import { idempotencyRows } from "./idempotency-figures.js";
import { mcpRows, toolRow } from "./mcp-figures.js";
import { loadConfig, type Config } from "../config/index.js";
import {
  countIdempotency,
  IDEMPOTENCY_OUTCOMES,
  idempotencyFigures,
  observeFirstArrival,
} from "../metrics/idempotency.js";
import { MetricsBuffer, prometheus } from "../metrics/index.js";
import { MCP_OUTCOMES, type McpOutcome } from "../metrics/mcp.js";
import type { LedgerEntry } from "../store/ledger.js";
import { newTraceparent, parseTraceparent, traceparentOf } from "../util/traceparent.js";
import { flushedTotals as flushed } from "../../test/support/flushed-totals.js";

describe("sluice_idempotency_total and the first-arrival histogram", () => {
  it("counts each outcome per route, apart from the decisions, and writes them as Prometheus text", async () => {
    const m = new MetricsBuffer();
    for (let i = 0; i < 3; i++) countIdempotency(m, "orders", "first");
    countIdempotency(m, "orders", "replay");
    countIdempotency(m, "orders", "in_flight");
    countIdempotency(m, "orders", "late_answer");
    countIdempotency(m, "pay", "mismatch");
    observeFirstArrival(m, "orders", 3, false); // bucket 7
    observeFirstArrival(m, "orders", 1_500, true); // bucket 43
    m.count("orders", "-", "allow");
    const total = await flushed(m);
    expect(total).toMatchObject({
      "idem:orders|first": 3,
      "idem:orders|replay": 1,
      "idem:orders|late_answer": 1,
      "idem:pay|mismatch": 1,
      "idem_latency:orders|7": 1,
      "idem_latency:orders|43": 1,
      "idem_first:orders|sum_ms": 1_503,
      "idem_first:orders|count": 2,
      "idem_first:orders|failed": 1,
    });
    const text = prometheus(total, {});
    // the decisions' reader passes over the idempotency fields
    expect(text.match(/^sluice_decisions_total\{.*$/gm)).toEqual([
      'sluice_decisions_total{route="orders",limit="-",decision="allow"} 1',
    ]);
    expect(text).toContain('sluice_idempotency_total{route="orders",outcome="first"} 3');
    expect(text).toContain('sluice_idempotency_total{route="orders",outcome="in_flight"} 1');
    expect(text).toContain('sluice_idempotency_total{route="orders",outcome="taken_over"} 0');
    expect(text).toContain('sluice_idempotency_total{route="pay",outcome="mismatch"} 1');
    expect(text.match(/^sluice_idempotency_total\{route="orders"/gm)).toHaveLength(IDEMPOTENCY_OUTCOMES.length);
    expect(text).toContain("# TYPE sluice_idempotency_first_arrival_latency_ms histogram");
    // cumulative: 3 ms is under le=4, 1.5 s only under le=2048 and above
    expect(text).toContain('sluice_idempotency_first_arrival_latency_ms_bucket{route="orders",le="2"} 0');
    expect(text).toContain('sluice_idempotency_first_arrival_latency_ms_bucket{route="orders",le="4"} 1');
    expect(text).toContain('sluice_idempotency_first_arrival_latency_ms_bucket{route="orders",le="1024"} 1');
    expect(text).toContain('sluice_idempotency_first_arrival_latency_ms_bucket{route="orders",le="2048"} 2');
    expect(text).toContain('sluice_idempotency_first_arrival_latency_ms_bucket{route="orders",le="+Inf"} 2');
    expect(text).toContain('sluice_idempotency_first_arrival_latency_ms_sum{route="orders"} 1503');
    expect(text).toContain('sluice_idempotency_first_arrival_latency_ms_count{route="orders"} 2');
    expect(text).toContain('sluice_idempotency_first_arrival_failures_total{route="orders"} 1');
  });

  it("sums the figures of several minutes, ignoring what is not theirs", () => {
    const f = idempotencyFigures([
      { "idem:a|replay": 2, "idem:a|bogus": 9, "a|-|allow": 5 },
      { "idem:a|replay": 3, "idem_latency:a|10": 4 },
    ]).get("a");
    expect(f?.outcomes.replay).toBe(5);
    expect(f?.latency.get(10)).toBe(4);
    expect(Object.keys(f?.outcomes ?? {})).toEqual([...IDEMPOTENCY_OUTCOMES]);
  });
});

describe("the dashboard's idempotency figures", () => {
  function config(): Config {
    const r = loadConfig({
      ORIGIN_URL: "https://o.example/",
      SLUICE: {
        routes: [
          { name: "orders", match: "/orders", idempotency: {} },
          { name: "plain", match: "/p" },
        ],
      },
    });
    if (!r.ok) throw r.error;
    return r.config;
  }

  it("give the suppression rate, the replay share and the first arrivals that failed, per idempotent route", () => {
    const minute = {
      "idem:orders|first": 10,
      "idem:orders|replay": 6,
      "idem:orders|in_flight": 3,
      "idem:orders|taken_over": 1,
      "idem:orders|mismatch": 0,
      "idem_first:orders|count": 11,
      "idem_first:orders|failed": 2,
      "idem_latency:orders|28": 11, // 2^(28/4) = 128 ms
    };
    const [row, ...rest] = idempotencyRows(config(), [minute, {}]);
    expect(rest).toEqual([]); // the route without idempotency has no row
    expect(row).toMatchObject({
      route: "orders",
      duplicates: 10,
      suppression_rate: 0.9, // 9 of 10 duplicates never reached the origin
      replay_share: 0.3, // 6 of 20 keyed requests
      first_arrivals: 11,
      first_failures: 2,
      first_p50_ms: 128,
    });
  });

  it("say null, not 0%, for a route without duplicates", () => {
    const [row] = idempotencyRows(config(), []);
    expect(row).toMatchObject({ duplicates: 0, suppression_rate: null, replay_share: null, first_p50_ms: null });
  });
});

describe("the dashboard's MCP figures", () => {
  function config(): Config {
    const r = loadConfig({
      ORIGIN_URL: "https://o.example/",
      SLUICE: {
        routes: [
          { name: "shop", match: "/mcp", mcp: { pass: ["search"] } },
          { name: "quiet", match: "/quiet/mcp", mcp: {} },
          { name: "orders", match: "/orders", idempotency: {} },
        ],
      },
    });
    if (!r.ok) throw r.error;
    return r.config;
  }

  it("give per tool the suppression rate, the replay share, the first runs that failed and their latency", () => {
    const minute = {
      "mcp:shop|first:create_order": 8,
      "mcp:shop|replay:create_order": 6,
      "mcp:shop|joined:create_order": 3,
      "mcp:shop|indeterminate:create_order": 1,
      "mcp:shop|mismatch:create_order": 2,
      "mcp:shop|refused:create_order": 4,
      "mcp:shop|passed:search": 5,
      "mcp_first:shop|count:create_order": 8,
      "mcp_first:shop|failed:create_order": 2,
      "mcp_latency:shop|28:create_order": 7, // 2^(28/4) = 128 ms
      "mcp_latency:shop|40:create_order": 1, // 1024 ms
      "idem:orders|first": 3, // another route's figures stay its own
    };
    const rows = mcpRows(config(), [
      minute,
      { "mcp:shop|first:create_order": 2, "mcp_first:shop|count:create_order": 2 },
    ]);
    expect(rows.map((r) => r.route)).toEqual(["shop", "quiet"]); // the route without mcp has no row
    const [shop, quiet] = rows;
    expect(shop?.tools.map((t) => t.tool)).toEqual(["create_order", "search"]);
    expect(shop?.tools[0]).toMatchObject({
      guarded: 22, // 10 first, 6 replays, 3 joined, 1 indeterminate, 2 mismatches; refusals apart
      suppression_rate: 0.409, // 9 of 22 answered without a run
      replay_share: 0.273, // 6 of 22
      first_runs: 10,
      first_failures: 2,
      first_p50_ms: 128,
      first_p99_ms: 1024,
    });
    expect(shop?.tools[0]?.outcomes).toMatchObject({ first: 10, refused: 4, passed: 0 });
    // a tool never guarded: no shares, no first runs
    expect(shop?.tools[1]).toMatchObject({
      guarded: 0,
      suppression_rate: null,
      replay_share: null,
      first_runs: 0,
      first_p50_ms: null,
    });
    expect(shop?.tools[1]?.outcomes.passed).toBe(5);
    expect(quiet).toEqual({ route: "quiet", tools: [] });
  });

  it("keep 0 <= replay share <= suppression rate <= 1 whatever was counted", () => {
    const counts = fc.record(
      Object.fromEntries(MCP_OUTCOMES.map((o) => [o, fc.nat({ max: 1_000_000 })])) as Record<
        McpOutcome,
        fc.Arbitrary<number>
      >,
    );
    fc.assert(
      fc.property(counts, (o) => {
        const row = toolRow("t", o, undefined);
        if (row.guarded === 0) return row.suppression_rate === null && row.replay_share === null;
        const [replay, suppression] = [row.replay_share ?? -1, row.suppression_rate ?? -1];
        return replay >= 0 && replay <= suppression && suppression <= 1;
      }),
    );
  });
});

describe("traceparent", () => {
  const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

  it("takes a valid W3C traceparent as it is, and a later version with more fields", () => {
    expect(parseTraceparent(valid)).toBe(valid);
    expect(parseTraceparent(` ${valid} `)).toBe(valid);
    expect(parseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")).toBeDefined();
  });

  it.each([
    ["uppercase hex", valid.toUpperCase()],
    ["version ff", valid.replace(/^00/, "ff")],
    ["version 00 with more fields", `${valid}-x`],
    ["an all-zero trace-id", `00-${"0".repeat(32)}-00f067aa0ba902b7-01`],
    ["an all-zero parent-id", `00-4bf92f3577b34da6a3ce929d0e0e4736-${"0".repeat(16)}-01`],
    ["a short trace-id", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"],
    ["garbage", "hello"],
    ["empty", ""],
  ])("refuses %s", (_, value) => {
    expect(parseTraceparent(value)).toBeUndefined();
  });

  it("makes up a valid one for a request without a valid one, and keeps a valid one", () => {
    const made = newTraceparent();
    expect(parseTraceparent(made)).toBe(made);
    expect(newTraceparent()).not.toBe(made);
    expect(traceparentOf(new Headers({ traceparent: valid }))).toEqual({ traceparent: valid, generated: false });
    const bad = traceparentOf(new Headers({ traceparent: "00-bad" }));
    expect(bad.generated).toBe(true);
    expect(parseTraceparent(bad.traceparent)).toBe(bad.traceparent);
  });
});

describe("the ledger query", () => {
  /** A ledger of `n` entries, newest first, ids `{n}-0` down to `1-0`, alternating two routes. */
  const ledger = (n: number): LedgerEntry[] =>
    Array.from({ length: n }, (_, i) => ({
      id: `${n - i}-0`,
      route: (n - i) % 2 ? "odd" : "even",
      key: "k".repeat(32),
      principal: (n - i) % 3 ? "a".repeat(32) : "b".repeat(32),
    }));
  const pager = (all: LedgerEntry[]) => {
    const calls: string[] = [];
    const page = async (end: string, start: string, count: number) => {
      calls.push(`${end} ${start}`);
      const below = end === "+" ? Infinity : Number(end.slice(1).split("-")[0]);
      const from = start === "-" ? 0 : Number(start.split("-")[0]);
      return all
        .filter((e) => Number(e.id.split("-")[0]) < below && Number(e.id.split("-")[0]) >= from)
        .slice(0, count);
    };
    return { page, calls };
  };

  it("pages back past the first page until enough entries pass the filters", async () => {
    const { page, calls } = pager(ledger(1_200));
    const found = await matching({ route: "odd", principal: "b".repeat(32) }, 150, 10_000, page);
    expect(found).toHaveLength(150);
    expect(found.every((e) => e.route === "odd" && e.principal === "b".repeat(32))).toBe(true);
    expect(calls).toEqual(["+ -", "(701-0 -"]); // the second page starts below the first's last id
  });

  it("stops at since, and at the ledger's length", async () => {
    const since = await matching({ since: 1_150 }, 1_000, 10_000, pager(ledger(1_200)).page);
    expect(since.map((e) => e.id)).toEqual(Array.from({ length: 51 }, (_, i) => `${1_200 - i}-0`));
    const { page, calls } = pager(ledger(1_200));
    await matching({ route: "none" }, 10, 600, page);
    expect(calls).toHaveLength(2); // 2 pages of 500 cover the length of 600
  });
});
