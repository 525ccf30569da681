/**
 * The dashboard's server-rendered views on their own (src/admin/view/): what each panel shows from
 * the dashboard's figures, with and without their optional fields, and that whatever a client
 * chose (a label, a deny entry, a route name in a hostile configuration) reaches the page escaped.
 */
import { describe, expect, it } from "vitest";
import { banWarning } from "./ban.js";
import { closestToExhaustion, seconds } from "./panels.js";
import { dashboardPage, loginPage, panelsFragment } from "./page.js";
import { PAGE_SCRIPT } from "./script.js";
import type { PanelsData } from "./types.js";

const minutes = Array.from({ length: 60 }, (_, i) => 29_000_000 + i);
const series = (last: number) => minutes.map((_, i) => (i === 59 ? last : 0));

const FULL: PanelsData = {
  dashboard: {
    minutes,
    routes: [
      {
        route: "products",
        allowed: series(5),
        shed: series(3),
        limits: [
          { limit: "-", allowed: 5, shed: 0 },
          { limit: "per-ip", allowed: 0, shed: 3 },
          { limit: "site", allowed: 0, shed: 0 },
        ],
        bans: 2,
        adaptive: [{ region: "eu", limit: 40, in_flight: 17, latency_ms: 182.5, base_ms: 90 }],
      },
    ],
    regions: [
      {
        region: "eu",
        per_second: { allow: 12.5, reject: 0.0267, fallback: 0 },
        rtt_p50_ms: 1.2,
        rtt_p99_ms: 8.75,
        local_share: 0.625,
        degraded_seconds: 75,
      },
    ],
    top_blocked: [
      { route: "products", id: "a".repeat(32), refusals: 3, label: "203.0.113.90", entry: "203.0.113.90" },
      { route: "products", id: "b".repeat(32), refusals: 2 },
    ],
  },
  lists: [{ kind: "deny", entry: "198.51.100.0/24", expires_at: "2026-11-23T16:00:00.000Z", note: "by hand" }],
  overrides: [
    { route: "products", field: "per-ip:*", rate: 50, burst: 50, period_ms: 60_000, expires_at: "2026-11-23T16:00Z" },
  ],
  health: [{ region: "eu", reachable: true, rtt_ms: 2 }],
};

async function render(node: unknown): Promise<string> {
  return String(await node);
}

describe("the dashboard's panels", () => {
  it("draw the totals, the route's chart and figures, the region's figures and the tables", async () => {
    const html = await render(panelsFragment(FULL));
    expect(html).toContain('id="fig-allowed">5<');
    expect(html).toContain('id="fig-shed">3<');
    expect(html).toContain('<span class="totals">5 allowed · 3 shed</span>');
    expect(html.match(/class="bar-allowed"/g)).toHaveLength(60);
    expect(html).toContain('<dd class="closest">per-ip: 38% shed</dd>'); // 3 of the route's 8
    expect(html).toContain('<dd class="bans">2</dd>');
    expect(html).toContain("eu: 17 of 40 in flight (origin 182.5 ms, base 90.0 ms)");
    expect(html).toMatch(
      /<tr data-region="eu">.*allow 13\/s.*reject 0\.027\/s.*1\.2 ms \/ 8\.8 ms.*63%.*1 min 15 s.*reachable, 2 ms/s,
    );
    expect(html).not.toContain("fallback 0"); // verdicts at zero are left out
    expect(html).toContain('data-action="ban" data-entry="203.0.113.90"'); // the labelled row can be banned
    expect(html).toContain(`<code>${"b".repeat(12)}…</code>`); // the unlabelled one shows its hash
    expect(html).toContain('data-action="lift" data-kind="deny" data-entry="198.51.100.0/24"');
    expect(html).toContain("per-ip (all)");
  });

  it("tolerate the optional figures missing, and show a banned client's row as banned", async () => {
    const bare: PanelsData = {
      ...FULL,
      dashboard: {
        minutes,
        routes: [{ route: "products", allowed: series(1), shed: series(0) }],
        top_blocked: [{ route: "products", id: "c".repeat(32), refusals: 1, label: "k1…9z", entry: "198.51.100.0/24" }],
      },
    };
    const html = await render(panelsFragment(bare));
    expect(html).toContain('<dd class="closest">—</dd>');
    expect(html).toContain('<dd class="bans">—</dd>');
    expect(html).not.toContain("adaptive limit");
    expect(html).toMatch(/<tr data-region="eu"><td>eu<\/td><td class="verdicts">—<\/td>/); // health only
    expect(html).toContain('data-action="lift" data-kind="deny" data-entry="198.51.100.0/24">Unban');
    const nothing = await render(panelsFragment({ ...bare, unavailable: ["the figures"], health: [] }));
    expect(nothing).toContain("Could not read the figures");
  });

  it("escape what clients and configurations chose", async () => {
    const evil = '<img src=x onerror="alert(1)">';
    const data: PanelsData = {
      ...FULL,
      dashboard: {
        ...FULL.dashboard,
        routes: [{ route: evil, allowed: series(1), shed: series(1) }],
        top_blocked: [
          { route: evil, id: "d".repeat(32), refusals: 9, label: evil, entry: `header:x-api-key="${evil}` },
        ],
      },
      lists: [{ kind: "deny", entry: evil, expires_at: evil, note: evil }],
    };
    const html = await render(dashboardPage(data, [{ route: evil, limit: evil }]));
    expect(html).not.toContain("<img");
    expect(html).toContain("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;");
    expect(html.startsWith("<!doctype html>")).toBe(true);
  });

  it("draw each idempotent route's suppression rate, replay share and failed first arrivals", async () => {
    const outcomes = {
      first: 10,
      replay: 6,
      in_flight: 3,
      mismatch: 1,
      indeterminate: 0,
      released: 2,
      taken_over: 1,
      late_answer: 0,
      reconciled: 0,
      reconcile_failed: 0,
    };
    const data: PanelsData = {
      ...FULL,
      dashboard: {
        ...FULL.dashboard,
        idempotency: [
          {
            route: "orders",
            outcomes,
            duplicates: 10,
            suppression_rate: 0.9,
            replay_share: 0.2857,
            first_arrivals: 11,
            first_failures: 2,
            first_p50_ms: 128,
            first_p99_ms: 1024,
            indeterminate: { waiting: 3, oldest_ms: 125_000 },
          },
          {
            route: "quiet",
            outcomes: { ...outcomes, first: 0, replay: 0, in_flight: 0, mismatch: 0, released: 0, taken_over: 0 },
            duplicates: 0,
            suppression_rate: null,
            replay_share: null,
            first_arrivals: 0,
            first_failures: 0,
            first_p50_ms: null,
            first_p99_ms: null,
          },
        ],
      },
    };
    const html = await render(panelsFragment(data));
    expect(html).toContain("Idempotency, last hour");
    expect(html).toMatch(
      /<tr data-route="orders"><td>orders<\/td><td class="suppression bad">90\.0% of 10<\/td><td class="replay-share">28\.6%<\/td><td class="first-failures bad">2 of 11<\/td><td class="first-latency">128\.0 ms \/ 1024\.0 ms<\/td>/,
    );
    expect(html).toContain("first 10 · replay 6 · in_flight 3 · mismatch 1 · released 2 · taken_over 1");
    // the keys indeterminate now, and how long the oldest has waited; unread: a dash
    expect(html).toContain('<td class="indeterminate bad">3 (2 min)</td>');
    expect(html).toMatch(/<tr data-route="quiet">.*<td class="indeterminate">—<\/td>/);
    expect(html).toMatch(
      /<tr data-route="quiet"><td>quiet<\/td><td class="suppression">— of 0<\/td><td class="replay-share">—<\/td><td class="first-failures">0 of 0<\/td>.*<td class="outcomes">none<\/td>/,
    );
    // without idempotent routes (or figures) there is no panel
    expect(await render(panelsFragment(FULL))).not.toContain("idempotency-panel");
  });

  it("draw each MCP route's tools: suppression rate, replay share, failed first runs and their latency", async () => {
    const outcomes = { first: 10, replay: 6, joined: 3, refused: 4, passed: 0, indeterminate: 1, mismatch: 2 };
    const quiet = {
      outcomes: { ...outcomes, first: 0, replay: 0, joined: 0, refused: 0, indeterminate: 0, mismatch: 0, passed: 5 },
      guarded: 0,
      suppression_rate: null,
      replay_share: null,
      first_runs: 0,
      first_failures: 0,
      first_p50_ms: null,
      first_p99_ms: null,
    };
    const data: PanelsData = {
      ...FULL,
      dashboard: {
        ...FULL.dashboard,
        mcp: [
          {
            route: "shop",
            tools: [
              {
                tool: "create_order",
                outcomes,
                guarded: 22,
                suppression_rate: 0.409,
                replay_share: 0.273,
                first_runs: 10,
                first_failures: 2,
                first_p50_ms: 128,
                first_p99_ms: 1024,
              },
              { tool: "search", ...quiet },
            ],
          },
          { route: "idle", tools: [] },
        ],
      },
    };
    const html = await render(panelsFragment(data));
    expect(html).toContain("MCP tools, last hour");
    expect(html).toMatch(
      /<tr data-route="shop" data-tool="create_order"><td>shop<\/td><td>create_order<\/td><td class="suppression">40\.9% of 22<\/td><td class="replay-share">27\.3%<\/td><td class="first-failures bad">2 of 10<\/td><td class="first-latency">128\.0 ms \/ 1024\.0 ms<\/td>/,
    );
    expect(html).toContain("first 10 · replay 6 · joined 3 · refused 4 · indeterminate 1 · mismatch 2");
    expect(html).toMatch(
      /<tr data-route="shop" data-tool="search">.*<td class="suppression">— of 0<\/td><td class="replay-share">—<\/td><td class="first-failures">0 of 0<\/td><td class="first-latency">— \/ —<\/td><td class="outcomes">passed 5<\/td>/,
    );
    expect(html).toMatch(/<tr data-route="idle"><td>idle<\/td><td colspan="6">no calls<\/td><\/tr>/);
    // without MCP routes there is no panel
    expect(await render(panelsFragment(FULL))).not.toContain("mcp-panel");
  });

  it("draw each queue route's backlog against max_depth, the oldest job, the sheds and the delivery lag", async () => {
    const row = {
      route: "sms",
      depth: 3,
      oldest_age_ms: 125_000,
      max_depth: 3,
      shed_depth: 4,
      shed_age: 1,
      expired: 2,
      delivered: 40,
      failed: 1,
      lag_mean_ms: 850,
    };
    const data: PanelsData = {
      ...FULL,
      dashboard: {
        ...FULL.dashboard,
        queues: [
          row,
          { ...row, route: "idle", depth: null, oldest_age_ms: null, max_depth: null, shed_depth: 0, shed_age: 0 },
        ],
      },
    };
    const html = await render(panelsFragment(data));
    expect(html).toMatch(
      /<tr data-route="sms"><td>sms<\/td><td class="depth bad">3 of 3<\/td><td class="oldest">2 min 5 s<\/td><td class="shed bad">4 \/ 1<\/td><td class="expired bad">2<\/td><td class="done">40 \/ 1<\/td><td class="lag">850 ms<\/td><\/tr>/,
    );
    expect(html).toMatch(
      /<tr data-route="idle"><td>idle<\/td><td class="depth">—<\/td><td class="oldest">—<\/td><td class="shed">0 \/ 0<\/td>/,
    );
    // without queue routes there is no panel
    expect(await render(panelsFragment(FULL))).not.toContain("queue-panel");
  });

  it("keep the login form, saying when the token was wrong", async () => {
    const form = await render(loginPage());
    expect(form).toContain('<form method="post" action="/__sluice/login">');
    expect(form).toContain('name="token"');
    expect(form).not.toContain("not the admin token");
    expect(await render(loginPage(true))).toContain("not the admin token");
  });

  it("label the region figures with their window, and the global bucket as global (issue 30, point 9)", async () => {
    const data: PanelsData = {
      ...FULL,
      dashboard: {
        ...FULL.dashboard,
        regions: FULL.dashboard.regions?.map((r) => ({ ...r, window_minutes: 5 })),
        top_blocked: [{ route: "search", id: "e".repeat(32), refusals: 4, label: "global" }],
      },
    };
    const html = await render(panelsFragment(data));
    expect(html).toContain("<th>decisions/s by verdict, mean of the last 5 minutes</th>");
    expect(html).toContain("<th>Redis RTT p50 / p99, the last 5 minutes</th>");
    expect(html).toContain("<th>local (leased), the last 5 minutes</th>");
    expect(html).toContain("<th>degraded, last hour</th>");
    expect(html).toMatch(/<p class="window" id="region-window">Rates are means per second over the last 5 minutes;/);
    // the global bucket by its name, not its hash, and nothing to ban
    expect(html).toContain('<td class="client" title="' + "e".repeat(32) + '">global</td>');
    expect(html).toContain(
      'disabled="" title="the global bucket is every client&#39;s: there is no one client to ban"',
    );
    expect(html).not.toContain("<code>eeee");
  });

  it("say what a ban from a masked row denies before it is confirmed: the whole range, how many addresses (issue 30, point 9)", async () => {
    const data: PanelsData = {
      ...FULL,
      dashboard: {
        ...FULL.dashboard,
        top_blocked: [
          { route: "api", id: "f".repeat(32), refusals: 3, label: "127.0.0.0/24", entry: "127.0.0.0/24" },
          { route: "api", id: "9".repeat(32), refusals: 2, label: "203.0.113.9", entry: "203.0.113.9" },
        ],
      },
    };
    const html = await render(panelsFragment(data));
    expect(html).toContain(
      'data-entry="127.0.0.0/24" data-confirm="Ban the whole range 127.0.0.0/24: 256 addresses, 127.0.0.0 to 127.0.0.255, every client in it, not only the one refused. Its requests get 403 on every path the deny list guards, until the ban ends.">Ban range</button>',
    );
    expect(html).toContain('data-confirm="Ban the one address 203.0.113.9. Its requests get 403');
    expect(banWarning("2001:db8:1::/48")).toMatch(
      /^Ban the whole range 2001:db8:1::\/48: 2\^80 addresses, every client in it/,
    );
    expect(banWarning("10.0.0.0/8")).toMatch(
      /^Ban the whole range 10.0.0.0\/8: 16,777,216 addresses, 10.0.0.0 to 10.255.255.255,/,
    );
    expect(banWarning("jwt:sub=alice")).toMatch(
      /^Ban the JWT subject "alice": every request whose verified token names it/,
    );
    // the page's script asks with these words, how long, and the request it will send
    const page = await render(dashboardPage(data, []));
    expect(() => new Function(PAGE_SCRIPT)).not.toThrow(); // the script parses
    expect(page).toContain("if (!confirm(question)) return say(");
    expect(page).toContain(
      '"\\n\\nFor " + ttlSelect.selectedOptions[0].text + ". Written: PUT " + base + "/lists " + JSON.stringify(body)',
    );
  });

  it("say what the operator must know to read the page right: routes no middleware serves, routes not shown", async () => {
    const data: PanelsData = {
      ...FULL,
      dashboard: {
        ...FULL.dashboard,
        notices: ['route "app" is served by rateLimit() but is not in adminApi()\'s config: its figures are not shown'],
        routes: [
          {
            route: "api",
            allowed: series(0),
            shed: series(0),
            unserved: 'no middleware of this app serves route "api"',
          },
        ],
      },
    };
    const html = await render(panelsFragment(data));
    expect(html).toContain(
      '<div class="card notice" id="notices"><ul><li>route &quot;app&quot; is served by rateLimit()',
    );
    expect(html).toContain('<p class="unserved notice">no middleware of this app serves route &quot;api&quot;</p>');
    expect(await render(panelsFragment(FULL))).not.toContain('id="notices"');
    // no route to switch (rateLimit() applies no modes): the form says so
    expect(await render(dashboardPage(FULL, [], []))).toContain('id="no-modes"');
    expect(await render(dashboardPage(FULL, [], ["api"]))).not.toContain('id="no-modes"');
  });

  it("name the limit closest to exhaustion by its shed share, and durations as an operator reads them", () => {
    expect(closestToExhaustion(undefined)).toBeUndefined();
    expect(closestToExhaustion([{ limit: "-", allowed: 10, shed: 0 }])).toBeUndefined(); // nothing shed
    const limits = [
      { limit: "-", allowed: 80, shed: 0 },
      { limit: "per-ip", allowed: 0, shed: 5 },
      { limit: "site", allowed: 0, shed: 15 },
      { limit: "deny-list", allowed: 0, shed: 20 }, // not a limit: never the one closest to exhaustion
    ];
    expect(closestToExhaustion(limits)).toEqual({ limit: "site", share: 0.125 });
    expect([seconds(0), seconds(59.6), seconds(61), seconds(7200), seconds(7260)]).toEqual([
      "0 s",
      "1 min",
      "1 min 1 s",
      "2 h",
      "2 h 1 min",
    ]);
  });
});
