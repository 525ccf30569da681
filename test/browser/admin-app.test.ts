/**
 * adminApi()'s dashboard in an app of its own (test/browser/admin-app/worker.ts, bundled with
 * esbuild and run in workerd against a real Redis), driven by a real browser: from the sign-in
 * form to the dashboard page with its panels, the route the app's middleware serve under the name
 * they were given; a ban from a masked row says, before it is confirmed, that it denies a range
 * (issue 30, points 1, 2 and 9).
 */
import { build } from "esbuild";
import { Miniflare } from "miniflare";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chromiumExecutable } from "../support/chromium.js";
import { fileRedis, TOKEN } from "../integration/stack.js";

const ADMIN = "admin-app-token-0123456789";
const CLIENT = "203.0.113.90";
/** The client's label under the default `labels = "masked"`: its /24, which a ban from its row denies whole. */
const RANGE = "203.0.113.0/24";

const db = fileRedis();
let mf: Miniflare;
let dir: string;
let base: string;
let browser: Browser;

beforeAll(async () => {
  // under the working directory, as workerd reads modules from below it (not /tmp)
  mkdirSync(resolve(".wrangler"), { recursive: true });
  dir = mkdtempSync(resolve(".wrangler/admin-app-"));
  const script = join(dir, "worker.js");
  await build({
    entryPoints: [new URL("./admin-app/worker.ts", import.meta.url).pathname],
    outfile: script,
    bundle: true,
    format: "esm",
    platform: "neutral",
    mainFields: ["module", "main"],
    conditions: ["workerd", "worker", "import"],
    loader: { ".lua": "text" },
    logLevel: "silent",
  });
  mf = new Miniflare({
    modules: true,
    scriptPath: script,
    compatibilityDate: "2026-04-01",
    bindings: {
      UPSTASH_REDIS_REST_URL: db.stack.bridge.url,
      UPSTASH_REDIS_REST_TOKEN: TOKEN,
      SLUICE_ADMIN_TOKEN: ADMIN,
    },
    host: "127.0.0.1",
    port: 0,
    handleRuntimeStdio: (out: NodeJS.ReadableStream, err: NodeJS.ReadableStream) => (out.resume(), err.resume()),
  });
  base = (await mf.ready).origin;
  browser = await chromium.launch({
    executablePath: await chromiumExecutable(),
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"],
  });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await mf?.dispose();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const call = (path: string, ip: string, headers: Record<string, string> = {}) =>
  mf.dispatchFetch(`http://app.test${path}`, { headers: { "CF-Connecting-IP": ip, ...headers } });

/** Calls `path` as `ip` until `done` says yes (bounded), giving the last status. */
async function statusUntil(path: string, ip: string, done: (status: number) => boolean, ms = 12_000) {
  const until = Date.now() + ms;
  let status = 0;
  while (Date.now() < until) {
    status = (await call(path, ip)).status;
    if (done(status)) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  return status;
}

describe("adminApi()'s dashboard in an app of its own, in a real browser", () => {
  it("signs in from /__sluice to the dashboard at /__sluice/, which charts the app's routes by the middleware's names", async () => {
    // traffic: api 5 from one client (3 allowed, 2 shed); search 5 from five clients, one global bucket (3, 2)
    for (let i = 0; i < 5; i++) await call("/api/items", CLIENT);
    for (let i = 0; i < 5; i++) await call("/search", `198.51.100.${10 + i}`);
    await call("/__sluice/metrics", CLIENT, { authorization: `Bearer ${ADMIN}` }); // flushes the isolate's counts

    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await signIn(page);
    expect(new URL(page.url()).pathname).toBe("/__sluice/"); // where the form's redirect lands
    expect(await page.textContent('.chart[data-route="api"] .totals')).toBe("3 allowed · 2 shed");
    expect(await page.textContent('.chart[data-route="search"] .totals')).toBe("3 allowed · 2 shed");
    expect(await page.textContent("#fig-routes")).toBe("2");
    expect(await page.locator("#notices").count()).toBe(0); // every route shown is served, every one served is shown
    expect(await page.textContent("#region-window")).toContain("means per second over the last 5 minutes");
    // rateLimit() applies no route modes: the form says so rather than offer a switch that does nothing
    expect(await page.textContent("#no-modes")).toContain("not by rateLimit()");

    // the global bucket by its name, with nothing to ban
    const global = page.locator('#blocked tr[data-label="global"]');
    expect(await global.locator("td.client").textContent()).toBe("global");
    expect(await global.locator("button").isDisabled()).toBe(true);

    await banRange(page);
    await page.close();
  }, 90_000);
});

/** The sign-in form at /__sluice (no slash): a wrong token says so, the right one lands on the dashboard. */
async function signIn(page: Page) {
  await page.goto(`${base}/__sluice`);
  await page.fill('input[name="token"]', "wrong-token");
  await page.click('button[type="submit"]');
  await page.waitForURL(/\/__sluice\/login$/);
  expect(await page.textContent("form")).toContain("not the admin token");
  await page.fill('input[name="token"]', ADMIN);
  await page.click('button[type="submit"]');
  await page.waitForSelector('body[data-loaded="yes"]', { timeout: 15_000 });
}

/**
 * Ban from the masked row: the question names the range, how many addresses, for how long and the
 * request; dismissed, nothing is written; accepted, another address of the range is refused.
 */
async function banRange(page: Page) {
  const row = page.locator(`#blocked tr[data-label="${RANGE}"]`);
  const ban = row.locator('button[data-action="ban"]');
  expect(await ban.textContent()).toBe("Ban range");

  let asked = "";
  page.once("dialog", (d) => {
    asked = d.message();
    void d.dismiss();
  });
  await ban.click();
  await page.waitForFunction("document.getElementById('status')?.textContent?.includes('cancelled')", undefined, {
    timeout: 10_000,
  });
  expect(asked).toContain(
    `Ban the whole range ${RANGE}: 256 addresses, 203.0.113.0 to 203.0.113.255, every client in it, not only the one refused.`,
  );
  expect(asked).toContain("For 1 hour. Written: PUT /__sluice/lists ");
  expect(asked).toContain(`{"kind":"deny","entry":"${RANGE}","ttl":"1h",`);
  expect(await page.locator(`#lists tr[data-entry="${RANGE}"]`).count()).toBe(0);
  expect((await call("/api/items", "203.0.113.7")).status).toBe(200);

  page.once("dialog", (d) => void d.accept());
  await ban.click();
  await page.waitForSelector(`#lists tr[data-entry="${RANGE}"]`, { timeout: 10_000 });
  // the whole range: an address of it that was never refused is denied too
  expect(await statusUntil("/api/items", "203.0.113.8", (s) => s === 403)).toBe(403);
}
