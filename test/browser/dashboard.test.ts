import { mkdirSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import type { Miniflare } from "miniflare";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, useStack } from "../integration/stack.js";
import { chromiumExecutable } from "../support/chromium.js";
import { countColour, decodePng } from "../support/png.js";

const ADMIN = "dashboard-token-0123456789";
/** Where each run leaves its screenshot (ignored by git). */
const SCREENSHOTS = resolve(".wrangler/screenshots");
/**
 * The tracked screenshot the README and docs show, written only when asked for
 * (`npm run docs:screenshot`, i.e. `SLUICE_SCREENSHOT=1`): a test run leaves the checkout as it was.
 */
const DOCS_SCREENSHOT = process.env.SLUICE_SCREENSHOT === "1" ? resolve("docs/dashboard.png") : undefined;

const rig = useStack({
  sluice: {
    key_prefix: "d",
    // decisions are Redis's, even on a loaded machine: the figures and refusals below count on it
    timeout_ms: 10_000,
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

const bearer = { authorization: `Bearer ${ADMIN}` };
const CLIENT = "203.0.113.90";
/** The client's readable label, under the default `labels = "masked"`: its /24, which is also what a ban from its row denies. */
const LABEL = "203.0.113.0/24";

/** Calls `path` as `ip` until `done` says yes (the lists reach an isolate within 5 s), giving the last status. */
async function statusUntil(path: string, ip: string, done: (status: number) => boolean, ms = 12_000) {
  const until = Date.now() + ms;
  let status = 0;
  while (Date.now() < until) {
    status = (await call(mf, path, { ip })).status;
    if (done(status)) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  return status;
}

/** The ledger's admin entries, newest first, with their detail parsed. */
async function adminLedger() {
  const entries = (await call(mf, "/__sluice/ledger?count=50", { headers: bearer })).json().entries as Array<
    Record<string, string>
  >;
  return entries
    .filter((e) => e.event?.startsWith("admin_"))
    .map((e) => ({
      event: e.event,
      who: e.who,
      at: e.at,
      detail: JSON.parse(e.detail ?? "{}") as Record<string, unknown>,
    }));
}

describe("the dashboard, in a real browser", () => {
  it("signs in, charts allowed vs shed per route, refreshes itself, bans and unbans a refused client from its row", async () => {
    // traffic: products 8 (5 allowed, 3 shed) from one client; search 6 (3 allowed, 3 shed)
    for (let i = 0; i < 8; i++) await call(mf, "/products/1", { ip: CLIENT });
    for (let i = 0; i < 6; i++) await call(mf, "/search", { ip: `203.0.113.${100 + i}` });
    await call(mf, "/__sluice/metrics", { headers: bearer }); // flushes the isolate's counts

    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await signIn(page);

    expect(await page.textContent("#fig-allowed")).toBe("8");
    expect(await page.textContent("#fig-shed")).toBe("6");
    expect(await page.textContent('.chart[data-route="products"] .totals')).toBe("5 allowed · 3 shed");
    expect(await page.textContent('.chart[data-route="search"] .totals')).toBe("3 allowed · 3 shed");
    const chartShot = decodePng(await page.locator('.chart[data-route="products"] svg').screenshot());
    expect(countColour(chartShot, [74, 222, 128])).toBeGreaterThan(20); // the allowed bar is drawn
    expect(countColour(chartShot, [248, 113, 113])).toBeGreaterThan(10); // and the shed bar on it
    expect(await page.textContent('.chart[data-route="products"] .closest')).toBe("per-ip: 38% shed");

    // more refusals of the same client: the page shows them without being reloaded
    for (let i = 0; i < 2; i++) expect((await call(mf, "/products/1", { ip: CLIENT })).status).toBe(429);
    await call(mf, "/__sluice/metrics", { headers: bearer });
    await page.waitForFunction("document.querySelector('#fig-shed')?.textContent === '8'", undefined, {
      timeout: 10_000,
    });
    expect(Number(await page.getAttribute("body", "data-refreshed"))).toBeGreaterThan(0);

    await readRegionPanel(page);
    await banAndLift(page);
    await overrideAndDeny(page);
    await switchMode(page);
    await signOut(page);
    await page.close();
  });
});

async function signIn(page: Page) {
  await page.goto(`${base}/__sluice/`);
  await page.fill('input[name="token"]', "wrong-token");
  await page.click('button[type="submit"]');
  await page.waitForURL(/\/__sluice\/login$/); // the click does not wait for the form's POST to load
  expect(await page.locator('input[name="token"]').count()).toBe(1); // still the login form
  expect(await page.textContent("form")).toContain("not the admin token");
  await page.fill('input[name="token"]', ADMIN);
  await page.click('button[type="submit"]');
  await page.waitForSelector('body[data-loaded="yes"]', { timeout: 15_000 });

  const cookie = (await page.context().cookies()).find((c) => c.name === "sluice_admin");
  expect(cookie).toMatchObject({ path: "/__sluice", httpOnly: true, sameSite: "Strict" });
  expect(cookie?.value).toMatch(/^\d{13}\.[0-9a-f]{32}\.[0-9a-f]{64}$/); // a signed expiry and id, never the token itself
  expect(cookie?.value).not.toContain(ADMIN);
}

/** The home region's row: its Redis reachable, and what its isolates decided, how fast and how. */
async function readRegionPanel(page: Page) {
  const row = page.locator('#regions tr[data-region="home"]');
  expect(await row.locator("td.ok").textContent()).toMatch(/^reachable, \d+ ms$/);
  expect(await row.locator(".verdicts").textContent()).toMatch(/allow \d/);
  expect(await row.locator(".rtt").textContent()).toMatch(/^[\d.]+ ms \/ [\d.]+ ms$/);
  expect(await row.locator(".local-share").textContent()).toMatch(/^\d+%$/);
  expect(await row.locator(".degraded").textContent()).toBe("0 s");
}

/**
 * The refused client found by its readable label, banned from its row (the next request from it is
 * the deny list's 403, on any path), the screenshot taken, then the ban lifted early from the lists
 * table (the client is let through again); both changes are in the ledger with the session's name.
 */
async function banAndLift(page: Page) {
  const row = page.locator(`#blocked tr[data-label="${LABEL}"]`);
  expect(await row.locator("td.client").textContent()).toBe(LABEL);
  // a ban asks first, saying the entry is the client's whole /24 (test/browser/admin-app.test.ts reads the question)
  page.once("dialog", (d) => void d.accept());
  await row.locator('button[data-action="ban"]').click();
  await page.waitForSelector(`#lists tr[data-entry="${LABEL}"]`, { timeout: 10_000 });
  expect(await row.locator('button[data-action="lift"]').textContent()).toBe("Unban"); // the row shows the ban
  expect(await statusUntil("/products/1", CLIENT, (s) => s === 403)).toBe(403);
  expect((await call(mf, "/unrouted", { ip: CLIENT })).status).toBe(403); // a deny entry holds on every path

  const shot = await page.screenshot({ path: resolve(SCREENSHOTS, "dashboard.png"), fullPage: true });
  expect(shot.length).toBeGreaterThan(10_000);
  if (DOCS_SCREENSHOT) writeFileSync(DOCS_SCREENSHOT, shot);

  await page.locator(`#lists tr[data-entry="${LABEL}"] button[data-action="lift"]`).click();
  await page.waitForSelector(`#lists tr[data-entry="${LABEL}"]`, { state: "detached", timeout: 10_000 });
  expect(await statusUntil("/unrouted", CLIENT, (s) => s !== 403)).toBe(200);

  const [unban, ban] = await adminLedger();
  expect(ban).toMatchObject({ event: "admin_ban", detail: { kind: "deny", entry: LABEL, ttl: "1h" } });
  expect(unban).toMatchObject({ event: "admin_unban", who: ban?.who, detail: { entry: LABEL, removed: true } });
  expect(ban?.who).toMatch(/^session:[0-9a-f]{12}$/); // the admin session, never its cookie
  expect(Number(unban?.at)).toBeGreaterThanOrEqual(Number(ban?.at));
}

/** The override form (everybody on products/per-ip) and the deny form, each change in force, listed and ledgered. */
async function overrideAndDeny(page: Page) {
  await page.selectOption('#override-form select[name="target"]', "products/per-ip");
  await page.fill('#override-form input[name="rate"]', "50");
  await page.click("#override-form button");
  await page.waitForFunction("document.querySelector('#overrides')?.textContent?.includes('per-ip (all)')", undefined, {
    timeout: 10_000,
  });
  await new Promise((r) => setTimeout(r, 1_500)); // an override is in force within a second
  const fresh = [];
  for (let i = 0; i < 7; i++) fresh.push((await call(mf, "/products/1", { ip: "203.0.113.91" })).status);
  expect(fresh).toEqual(Array(7).fill(200)); // 7 > the configured 5 an hour: the override's 50 decide

  await page.fill('#deny-form input[name="entry"]', "198.51.100.0/24");
  await page.click("#deny-form button");
  await page.waitForSelector('#lists tr[data-entry="198.51.100.0/24"]', { timeout: 10_000 });
  const lists = await call(mf, "/__sluice/lists", { headers: bearer });
  expect(lists.json().entries).toEqual([expect.objectContaining({ kind: "deny", entry: "198.51.100.0/24" })]);

  const [deny, override] = await adminLedger();
  expect(override).toMatchObject({ event: "admin_override", detail: { route: "products", limit: "per-ip", rate: 50 } });
  expect(deny).toMatchObject({ event: "admin_ban", detail: { entry: "198.51.100.0/24" } });
}

/**
 * The route mode form switches search to `reject` (its requests get the 503 problem), the route
 * modes panel shows it with who set it, and its Back to normal button ends it (the limit refuses again).
 */
async function switchMode(page: Page) {
  await page.selectOption('#mode-form select[name="route"]', "search");
  await page.selectOption('#mode-form select[name="mode"]', "reject");
  await page.fill('#mode-form input[name="note"]', "drill");
  await page.click("#mode-form button");
  await page.waitForSelector('#route-modes tr[data-route="search"][data-mode="reject"]', { timeout: 10_000 });
  expect(await statusUntil("/search", "203.0.113.92", (s) => s === 503)).toBe(503);
  const [set] = await adminLedger();
  expect(set).toMatchObject({ event: "admin_route_mode", detail: { route: "search", mode: "reject", note: "drill" } });
  expect(set?.who).toMatch(/^session:[0-9a-f]{12}$/);
  await page.click('#route-modes button[data-action="normal"][data-route="search"]');
  await page.waitForSelector('#route-modes tr[data-route="search"][data-mode="normal"]', { timeout: 10_000 });
  expect(await statusUntil("/search", "203.0.113.92", (s) => s !== 503)).toBe(429); // the global limit, spent earlier
}

/** The sign-out button: back to the login form, the cookie gone from the browser and refused if replayed. */
async function signOut(page: Page) {
  const cookie = (await page.context().cookies()).find((c) => c.name === "sluice_admin");
  expect(cookie).toBeDefined();
  await page.click("#sign-out");
  await page.waitForSelector('input[name="token"]', { timeout: 10_000 });
  expect((await page.context().cookies()).find((c) => c.name === "sluice_admin")).toBeUndefined();
  const replayed = await call(mf, "/__sluice/api/dashboard", { headers: { cookie: `sluice_admin=${cookie?.value}` } });
  expect(replayed.status).toBe(401);
}
