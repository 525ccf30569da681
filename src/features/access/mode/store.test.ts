/**
 * The degrade switch's pieces on their own: its records in the lists hash (which the lists'
 * decoder must pass over, and the switch's decoder must not confuse with list entries), the
 * switch in force by expiry, and the dashboard's table and form for it, escaped.
 */
import { describe, expect, it } from "vitest";
import { decodeEntries } from "../lists-store.js";
import { decodeModes, modeInForce, type RouteMode } from "./store.js";
import { dashboardPage, panelsFragment } from "../../../admin/view/page.js";
import type { PanelsData } from "../../../admin/view/types.js";

const reject: RouteMode = { kind: "mode", route: "api", mode: "reject", until: 2_000, by: "token", note: "fire" };
const deny = { kind: "deny", entry: "198.51.100.7", until: 2_000 };

describe("a route's switch in the lists hash", () => {
  it("is read apart from the list entries, each decoder passing the other's values over", () => {
    const values = [JSON.stringify(reject), JSON.stringify(deny), "not json", { ...reject, mode: "sideways" }];
    expect(decodeModes(values)).toEqual([reject]);
    expect(decodeEntries(values)).toEqual([deny]);
  });

  it("is in force until its `until`, for its own route only", () => {
    expect(modeInForce([reject], "api", 1_999)).toEqual(reject);
    expect(modeInForce([reject], "api", 2_000)).toBeUndefined();
    expect(modeInForce([reject], "other", 1_000)).toBeUndefined();
  });
});

describe("the dashboard's route modes", () => {
  const data: PanelsData = {
    dashboard: { minutes: [], routes: [], top_blocked: [] },
    lists: [],
    overrides: [],
    health: [],
    modes: [
      { name: "api", mode: "reject", expires_at: "2030-01-01T00:00:00.000Z", by: "token", note: "<b>fire</b>" },
      { name: "other", mode: "normal" },
    ],
  };

  it("show each route's mode, with a way back to normal for a switched one only", async () => {
    const html = String(await panelsFragment(data));
    expect(html).toContain('<tr data-route="api" data-mode="reject">');
    expect(html).toContain('data-action="normal" data-route="api">Back to normal');
    expect(html).not.toContain('data-action="normal" data-route="other"');
    expect(html).toContain("token: &lt;b&gt;fire&lt;/b&gt;");
  });

  it("offer every route in the switch form", async () => {
    const html = String(await dashboardPage(data, [], ["api", "other"]));
    expect(html).toMatch(
      /<form id="mode-form">.*<option value="api">api<\/option><option value="other">other<\/option>/s,
    );
  });
});
