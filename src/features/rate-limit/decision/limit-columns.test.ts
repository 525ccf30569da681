import { describe, expect, it } from "vitest";
import decideLua from "../../../../lua/decide.lua";
import { loadConfig, type Limit } from "../../../config/index.js";
import { ALGORITHM_NAMES, algorithm } from "../algorithms/registry.js";
import { ALGORITHM_COLUMNS, DECIDE_LIMIT_COLUMNS, limitArgv, type DecideLimitArgs } from "./limit-columns.js";
import { scriptCall } from "./script-call.js";

/*
 * decide.lua's per-limit ARGV columns are named once on each side: DECIDE_LIMIT_COLUMNS for the
 * TypeScript that writes them, the script's COLUMNS table for the Lua that reads them by name.
 * These tests hold the two equal, so that neither side can add, drop, rename or move a column alone.
 */

/** The names in decide.lua's `local COLUMNS = { ... }`, in order. */
function luaColumns(): string[] {
  const table = /^local COLUMNS = \{([^}]*)\}/m.exec(decideLua);
  if (!table) throw new Error("lua/decide.lua has no `local COLUMNS = { ... }` table");
  return [...(table[1] as string).matchAll(/'([^']*)'/g)].map((m) => m[1] as string);
}

function limitOf(def: Record<string, unknown>): Limit {
  const r = loadConfig({
    ORIGIN_URL: "https://o.example",
    SLUICE: { routes: [{ name: "r", match: "/", limits: [{ name: "l", ...def }] }] },
  });
  if (!r.ok) throw r.error;
  return r.config.routes[0]!.limits[0]!;
}

describe("decide.lua's per-limit ARGV columns", () => {
  it("are the same names in the same order in the script and in the TypeScript", () => {
    expect(luaColumns()).toEqual([...DECIDE_LIMIT_COLUMNS]);
  });

  it("are each read by the script by a name of the list, and none goes unread", () => {
    const read = new Set([...decideLua.matchAll(/\barg\(i, '([^']*)'\)/g)].map((m) => m[1] as string));
    expect([...read].filter((name) => !(DECIDE_LIMIT_COLUMNS as readonly string[]).includes(name))).toEqual([]);
    expect(DECIDE_LIMIT_COLUMNS.filter((name) => !read.has(name))).toEqual([]);
    // no read by position is left beside the names
    expect(decideLua).not.toMatch(/\barg\(i, \d+\)/);
  });

  it("are documented in the script's contract in the same order", () => {
    const contract = decideLua.slice(decideLua.indexOf("\nARGV     then"), decideLua.indexOf("\nReturns"));
    let at = 0;
    for (const name of DECIDE_LIMIT_COLUMNS) {
      const found = new RegExp(`\\b${name}\\b`).exec(contract.slice(at));
      expect(found, `"${name}" after the columns before it`).not.toBeNull();
      at += (found?.index ?? 0) + name.length;
    }
  });

  it("each mean one thing: an algorithm's own columns are read by that algorithm alone", () => {
    const settings = { warmup: 1, max_delay: 2, nodelay: true, margin: 3 };
    const owner = new Map<string, string>();
    for (const name of ALGORITHM_NAMES) {
      for (const column of Object.keys(algorithm(name).columns(settings, { slot: "s", entry: "e" }))) {
        expect(Object.keys(ALGORITHM_COLUMNS), `${name}'s ${column}`).toContain(column);
        expect(owner.get(column), `${column}, sent by ${name}`).toBeUndefined();
        owner.set(column, name);
      }
    }
  });

  it("are written by name, one value per column and limit, in the list's order", () => {
    const row = Object.fromEntries(DECIDE_LIMIT_COLUMNS.map((c, i) => [c, `v${i}`])) as DecideLimitArgs;
    expect(limitArgv(row)).toEqual(DECIDE_LIMIT_COLUMNS.map((_, i) => `v${i}`));

    const limit = limitOf({
      algorithm: "leaky_bucket",
      rate: 7,
      period: "2s",
      burst: 9,
      max_delay: "3s",
      nodelay: true,
    });
    const lease = { ask: 4, close: { epoch: 11, granted: 12, left: 13 } };
    const params = { rate: 7, period: 2000, burst: 9, cost: 2, floor: 3 };
    const { args } = scriptCall(
      [
        { limit, key: "k1", params, lease },
        { limit, key: "k2", override: { own: "1:2:3:4" } },
      ],
      "take",
    );
    const n = DECIDE_LIMIT_COLUMNS.length;
    expect(args).toHaveLength(3 + 2 * n);
    const column = (i: number, name: (typeof DECIDE_LIMIT_COLUMNS)[number]) =>
      args[3 + n * i + DECIDE_LIMIT_COLUMNS.indexOf(name)];
    expect([
      column(0, "algo"),
      column(0, "rate"),
      column(0, "period_us"),
      column(0, "burst"),
      column(0, "cost"),
    ]).toEqual(["2", "7", "2000000", "9", "2"]);
    expect([column(0, "max_delay_us"), column(0, "nodelay"), column(0, "floor")]).toEqual(["3000000", "1", "3"]);
    // the columns of the other algorithms, and settle's, as their defaults
    expect((["warmup_us", "slot_id", "entry_id", "margin_us", "delta"] as const).map((c) => column(0, c))).toEqual([
      "0",
      "",
      "",
      "0",
      "0",
    ]);
    expect((["lease_ask", "lease_epoch", "lease_granted", "lease_left"] as const).map((c) => column(0, c))).toEqual([
      "4",
      "11",
      "12",
      "13",
    ]);
    expect([column(1, "override_all"), column(1, "override_own"), column(1, "lease_ask")]).toEqual([
      "",
      "1:2:3:4",
      "0",
    ]);
  });
});
