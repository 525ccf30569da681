import { describe, expect, it } from "vitest";
import { replaceMarkedBlock } from "../anchor/render.js";
import { deliveries, renderSmsMarkdown, renderSmsSection, type SmsResult, worstWindow } from "./figures.js";
import { SMS_MARKERS } from "./index.js";

describe("worstWindow", () => {
  it("counts the most arrivals in any [t, t + 1 s), sliding over every arrival", () => {
    // 3 in [0, 1000), 2 in [1000, 2000) by the clock's seconds, but 4 in [900, 1900)
    expect(worstWindow([0, 10, 900, 1_000, 1_400, 1_899, 2_500])).toEqual({ count: 4, fromMs: 900 });
  });

  it("leaves out an arrival exactly one window after the start", () => {
    expect(worstWindow([0, 1_000, 2_000]).count).toBe(1);
    expect(worstWindow([0, 999, 2_000]).count).toBe(2);
  });

  it("does not depend on the order of the arrivals, and is 0 for none", () => {
    expect(worstWindow([1_899, 1_400, 0, 2_500, 900, 10, 1_000])).toEqual({ count: 4, fromMs: 900 });
    expect(worstWindow([])).toEqual({ count: 0, fromMs: 0 });
  });

  it("takes the window's width", () => {
    expect(worstWindow([0, 50, 99, 100, 150], 100).count).toBe(3);
  });
});

describe("deliveries", () => {
  it("counts each message once, and duplicates, missing and unknown ones apart", () => {
    expect(deliveries(["a", "b", "c", "d"], ["a", "b", "b", "c", "x", "b"])).toEqual({
      delivered: 3,
      duplicates: 2,
      missing: 1,
      unknown: 1,
    });
  });

  it("is clean when every message arrived once", () => {
    expect(deliveries(["a", "b"], ["b", "a"])).toEqual({ delivered: 2, duplicates: 0, missing: 0, unknown: 0 });
  });
});

const provider = { offered: 2_000, delivered: 2_000, duplicates: 0, missing: 0 };
const RESULT: SmsResult = {
  options: {
    messages: 2_000,
    concurrency: 32,
    rate: 400,
    maxBatchSize: 100,
    maxBatchTimeoutS: 1,
    deadlineMs: 40_000,
  },
  limit: { rate: 400, period: "1s", algorithm: "sliding_log", scope: "global", margin: "50ms" },
  regions: { us: 1_000, eu: 1_000 },
  answers: { "200 allow": 600, "202 queued": 1_400 },
  sluice: {
    ...provider,
    worst_second: 401,
    total_ms: 5_210,
    direct: 600,
    queued: 1_400,
    offer_ms: 2_100,
    admitted: 2_000,
    worst_second_admitted: 400,
  },
  straight: { ...provider, worst_second: 2_000, total_ms: 800 },
  problems: [],
};

describe("the section's tables", () => {
  it("prints both cases side by side", () => {
    const out: string[] = [];
    renderSmsSection(out, RESULT);
    const text = out.join("\n");
    expect(text).toMatch(/^13\. The SMS case: 2000 messages/m);
    expect(text).toContain("400/1s sliding_log (margin 50ms) global");
    expect(text).toMatch(/worst 1 s at the provider \(limit 400\)\s+│\s+2000\s+│\s+401/);
    expect(text).toMatch(/first offer to last delivery\s+│\s+0\.8 s\s+│\s+5\.2 s/);
    expect(text).toContain("max_batch_size 100, max_batch_timeout 1 s");
    expect(text).toMatch(/every offer answered after \(intake\)\s+│\s+—\s+│\s+2\.1 s \(952\/s\)/);
    expect(text).not.toContain("below the limit");
  });

  it("says so when the gateway took the burst in slower than the limit", () => {
    const slow: SmsResult = { ...RESULT, sluice: { ...RESULT.sluice, offer_ms: 8_000, direct: 1_990, queued: 10 } };
    const out: string[] = [];
    renderSmsSection(out, slow);
    expect(out.join("\n")).toContain("took the burst in at 250/s, below the limit");
    expect(renderSmsMarkdown(slow, { date: "d", revision: "r", command: "c" })).toContain("only 10 were queued");
  });

  it("writes a markdown table that fits between the docs' markers", () => {
    const md = renderSmsMarkdown(RESULT, { date: "2026-11-24", revision: "abc1234", command: "npm run bench" });
    expect(md).toContain("| worst 1 s at the provider (limit 400) | 2000 | 401 |");
    expect(md).toContain("| answered 200 at once / queued (202) | — | 600 / 1400 |");
    expect(md).toContain("| worst 1 s admitted by the limit (Redis's clock) | — | 400 (of 2000 read) |");
    expect(md).toContain("Measured 2026-11-24 at abc1234 with `npm run bench`.");
    expect(md).toContain('(`sliding_log`, `margin = "50ms"`, `scope = "global"`)');
    const doc = `# x\n${SMS_MARKERS.start}\nold\n${SMS_MARKERS.end}\n`;
    const once = replaceMarkedBlock(doc, md, SMS_MARKERS);
    expect(once).not.toContain("old");
    expect(replaceMarkedBlock(once, md, SMS_MARKERS)).toBe(once);
  });
});
