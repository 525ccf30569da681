import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import type { Miniflare } from "miniflare";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, useStack } from "../integration/stack.js";
import { chromiumExecutable } from "../support/chromium.js";
import { countColour, decodePng } from "../support/png.js";

const ADMIN = "dashboard-token-0123456789";
const SCREENSHOTS = resolve(".wrangler/screenshots");

const rig = useStack({
  sluice: {
    key_prefix: "d",
    routes: [
      { name: "products", match: "/products/*", limits: [{ name: "per-ip", rate: 5, period: "1h" }] },
      { name: "search", match: "/search", limits: [{ name: "site", key: "global", rate: 3, period: "1h" }] },
    ],
  },
  bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
  listen: true,
});
let mf: Miniflare;
let base: string;
let browser: Browser;

beforeAll(async () => {
  mf = rig.mf;
  base = (await mf.ready).origin;
  browser = await chromium.launch({
    executablePath: await chromiumExecutable(),
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  mkdirSync(SCREENSHOTS, { recursive: true });
});
afterAll(async () => {
  await browser?.close();
});

describe("the dashboard, in a real browser", () => {
  it("signs in, charts allowed vs shed per route, lists the top blocked, and adds a deny entry", async () => {
    // traffic: products 8 (5 allowed, 3 shed) from one client; search 6 (3 allowed, 3 shed)
    for (let i = 0; i < 8; i++) await call(mf, "/products/1", { ip: "203.0.113.90" });
    for (let i = 0; i < 6; i++) await call(mf, "/search", { ip: `203.0.113.${100 + i}` });
    await call(mf, "/__sluice/metrics", { headers: { authorization: `Bearer ${ADMIN}` } }); // flushes the isolate's counts

    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(`${base}/__sluice/`);
    await page.fill('input[name="token"]', "wrong-token");
    await page.click('button[type="submit"]');
    await page.waitForURL(/\/__sluice\/login$/); // the click does not wait for the form's POST to load
    expect(await page.locator('input[name="token"]').count()).toBe(1); // still the login form
    await page.fill('input[name="token"]', ADMIN);
    await page.click('button[type="submit"]');
    await page.waitForSelector('body[data-loaded="yes"]', { timeout: 15_000 });

    const cookie = (await page.context().cookies()).find((c) => c.name === "sluice_admin");
    expect(cookie).toMatchObject({ path: "/__sluice", httpOnly: true, sameSite: "Strict" });
    expect(cookie?.value).toMatch(/^\d{13}\.[0-9a-f]{64}$/); // a signed expiry, never the token itself
    expect(cookie?.value).not.toContain(ADMIN);

    expect(await page.textContent("#fig-allowed")).toBe("8");
    expect(await page.textContent("#fig-shed")).toBe("6");
    expect(await page.textContent('.chart[data-route="products"] .totals')).toBe("5 allowed · 3 shed");
    expect(await page.textContent('.chart[data-route="search"] .totals')).toBe("3 allowed · 3 shed");
    expect(await page.locator("#blocked tr").count()).toBeGreaterThan(1);
    expect(await page.textContent("#health")).toContain("reachable");

    const shot = await page.screenshot({ path: resolve(SCREENSHOTS, "dashboard.png"), fullPage: true });
    const chartShot = decodePng(await page.locator('.chart[data-route="products"] svg').screenshot());
    expect(countColour(chartShot, [74, 222, 128])).toBeGreaterThan(20); // the allowed bar is drawn
    expect(countColour(chartShot, [248, 113, 113])).toBeGreaterThan(10); // and the shed bar on it
    expect(shot.length).toBeGreaterThan(10_000);

    await page.fill('#deny-form input[name="entry"]', "198.51.100.0/24");
    await page.click("#deny-form button");
    await page.waitForFunction(
      "document.querySelector('#lists')?.textContent?.includes('198.51.100.0/24')",
      undefined,
      { timeout: 10_000 },
    );
    const lists = await call(mf, "/__sluice/lists", { headers: { authorization: `Bearer ${ADMIN}` } });
    expect(lists.json().entries).toEqual([expect.objectContaining({ kind: "deny", entry: "198.51.100.0/24" })]);
    await page.close();
  }, 60_000);
});
