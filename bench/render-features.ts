/** The printed tables of section 10's feature rows and section 11 (origin protection). */
import type { CostSide, FeatureRow } from "./billed-features.js";
import type { ProtectResult } from "./protect.js";
import { fmt, table } from "./table.js";

const byCommand = (s: CostSide): string =>
  Object.entries(s.by_command)
    .map(([c, n]) => `${c.toUpperCase()} ${fmt(n)}`)
    .join(" + ") || "—";

export function renderFeatures(out: string[], rows: FeatureRow[]): void {
  if (rows.length === 0) return;
  out.push(
    "",
    "   Cost of each #14 feature in Redis, per decision (HTTP requests counted by a tap; billed commands by MONITOR, checked against commandstats):",
  );
  out.push(
    table(
      [
        "feature",
        "decisions",
        "path HTTP",
        "path billed",
        "by command",
        "background HTTP",
        "background billed",
        "by command",
      ],
      rows.map((r) => [
        r.label,
        `${r.decisions}${r.requests !== r.decisions ? ` (+${r.requests - r.decisions} banned)` : ""}${r.degraded ? `, ${r.degraded} degraded` : ""}`,
        fmt(r.request_path.http_per_decision),
        fmt(r.request_path.billed_per_decision),
        byCommand(r.request_path),
        fmt(r.background.http_per_decision),
        fmt(r.background.billed_per_decision),
        byCommand(r.background),
      ]),
    ),
  );
  for (const r of rows.filter((x) => x.key === "ban" && x.refusals > 0)) {
    const per = (perDecision: number) => fmt(Math.round(((perDecision * r.decisions) / r.refusals) * 1000) / 1000);
    out.push(
      `   ban: per refusal ${per(r.background.http_per_decision)} background HTTP requests and ${per(r.background.billed_per_decision)} billed commands (${r.refusals} refusals, bans included).`,
    );
  }
  out.push(
    "   path = the decision's own script call (decide.lua take), before the origin is asked; background = what the Worker sends after the",
    "   response (waitUntil): a slot's release, a response cost's settle, a ban's refusal count (INCR + PEXPIRE) and the ban itself. A refusal",
    "   answered from the blocked-bucket cache costs no request on the path; banned requests (403 from the deny list) cost nothing and are",
    "   not decisions; a degraded decision (Redis over its budget on a loaded machine) settles nothing. The routine background (lists,",
    "   overrides copy, metrics, other routes' leases closing) is left out and kept in the JSON.",
  );
}

const pct = (x: number | undefined): string => (x === undefined ? "—" : `${(x * 100).toFixed(1)}%`);
const msOrDash = (x: number | null | undefined): string => (x === null || x === undefined ? "—" : x.toFixed(1));

export function renderProtect(out: string[], p: ProtectResult): void {
  const m = p.model;
  const o = p.options;
  out.push(
    "",
    `11. Origin protection: the gateway in front of a queueing origin (${m.servers} servers × ${m.serviceMs} ms, 503 past ${m.knee} in flight: ${p.capacity_per_s}/s at best),`,
    `    open-loop load of ${o.rate}/s (one request every ${(1000 / o.rate).toFixed(1)} ms, answered or not) for ${o.durationMs / 1000} s after ${o.warmupMs / 1000} s of warm-up`,
  );
  out.push(
    table(
      ["case", "goodput (200/s)", "p50 of 200s", "p99 of 200s", "429", "5xx", "origin max in flight"],
      p.cases.map((c) =>
        c.available
          ? [
              c.label,
              (c.goodput_per_s ?? 0).toFixed(1),
              msOrDash(c.p50_ok_ms),
              msOrDash(c.p99_ok_ms),
              pct(c.share_429),
              pct(c.share_5xx),
              String(c.origin_max_in_flight ?? "—"),
            ]
          : [c.label, "not available", "", "", "", "", ""],
      ),
    ),
  );
  out.push(
    "   goodput = 200s ÷ the measured seconds; latency = dispatchFetch until the body was read (ms); 429 / 5xx = shares of the requests sent.",
    "   Fixed caps: a route limit { key: global, algorithm: concurrency, limit: L, lease: 30s }. Adaptive: the route's `adaptive` setting,",
    '   "not available" when this build\'s configuration rejects it (the reason is in the JSON).',
  );
}
