/**
 * Security regressions of fallback copies: a copy is only ever served for the very resource (host,
 * path as the origin saw it, query, variant) it came from, and never when it was personal.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack } from "../integration/stack.js";

const perPath = [{ name: "once", key: "path", rate: 1, period: "1h" }];
const SLUICE: SluiceInput = {
  key_prefix: "sf",
  timeout_ms: 2_000,
  routes: [
    {
      name: "page",
      match: "/page/*",
      on_limit: "fallback",
      limits: [{ name: "once", key: "ip", rate: 1, period: "1h" }],
    },
    { name: "acct", match: "/acct/*", on_limit: "fallback", limits: perPath },
    { name: "shop", match: "/shop/*", on_limit: "fallback", limits: perPath },
  ],
};
/** In a Worker of its own: a configuration the schema refuses would turn every request of the Worker into a 500. */
const SHARED_COOKIES: SluiceInput = {
  key_prefix: "sfc",
  timeout_ms: 2_000,
  routes: [
    {
      name: "cookie-shared",
      match: "/shared-acct/*",
      on_limit: "fallback",
      fallback_cookies: "shared",
      limits: perPath,
    },
  ],
};

const rig = useStack({ sluice: SLUICE });
let mf: Miniflare;
let sharedCookies: Miniflare;

beforeAll(async () => {
  mf = rig.mf;
  sharedCookies = rig.worker({ sluice: SHARED_COOKIES });
  await sharedCookies.ready;
});

type Answer = Awaited<ReturnType<typeof call>>;
const show = (r: Answer) => `${r.status} ${r.headers.get("sluice-decision")} ${r.text.slice(0, 300)}`;
/** A GET to any host name the Worker serves (call() always says sluice.test). */
async function at(w: Miniflare, url: string, ip: string, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await w.dispatchFetch(url, { headers: { "CF-Connecting-IP": ip, ...headers } });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) as Record<string, unknown> };
}
/** Copies are written after the response (waitUntil): ask until one is served, bounded. */
async function untilFallback(send: () => Promise<Answer>): Promise<Answer> {
  let r = await send();
  for (let i = 0; i < 40 && r.headers.get("sluice-decision") !== "fallback"; i++) {
    await sleep(50);
    r = await send();
  }
  return r;
}

describe("3. fallback copies cannot be planted", () => {
  it("a path that only meets the route's limit as /page is not filed as /page's copy", async () => {
    const victim = "198.51.100.7";
    const attacker = "198.51.100.66";
    const own = await call(mf, "/page", { ip: victim });
    expect(own.headers.get("sluice-decision"), show(own)).toBe("allow");
    expect(own.json().path).toBe("/page");
    const planted = await call(mf, "/page/EVIL%2F..", { ip: attacker });
    expect(planted.headers.get("sluice-decision"), show(planted)).toBe("allow");
    expect(String(planted.json().path), "the origin is asked for the attacker's path").toContain("EVIL");
    await sleep(400); // both copies are written after their responses

    const shed = await call(mf, "/page", { ip: victim });
    expect(shed.headers.get("sluice-decision"), show(shed)).toBe("fallback");
    expect(shed.text, "the victim must get its own page, not the attacker's").not.toContain("EVIL");
    expect(shed.json().path).toBe("/page");
  });
});

describe("4. responses to authenticated requests are not shared", () => {
  it("a page fetched with Authorization or a cookie is never another client's fallback, unless the origin says public", async () => {
    const A = "203.0.113.21";
    const B = "203.0.113.22";

    const authed = await call(mf, "/acct/home", { ip: A, headers: { authorization: "Bearer alice" } });
    expect(authed.headers.get("sluice-decision"), show(authed)).toBe("allow");
    await sleep(400);
    const stolen = await call(mf, "/acct/home", { ip: B });
    expect(stolen.status, `B must not get the page A fetched with Authorization: ${show(stolen)}`).toBe(429);
    expect(stolen.headers.get("sluice-decision")).toBe("reject");

    const cookied = await call(mf, "/acct/settings", { ip: A, headers: { cookie: "session=alice" } });
    expect(cookied.headers.get("sluice-decision"), show(cookied)).toBe("allow");
    await sleep(400);
    const stolenToo = await call(mf, "/acct/settings", { ip: B });
    expect(stolenToo.status, `B must not get the page A fetched with a session cookie: ${show(stolenToo)}`).toBe(429);
    expect(stolenToo.headers.get("sluice-decision")).toBe("reject");

    // control: the origin marks the authenticated answer public: it is kept and shared
    const path = "/acct/news?cache-control=public,%20max-age=60";
    const pub = await call(mf, path, { ip: A, headers: { authorization: "Bearer alice" } });
    expect(pub.headers.get("sluice-decision"), show(pub)).toBe("allow");
    const shared = await untilFallback(() => call(mf, path, { ip: B }));
    expect(shared.headers.get("sluice-decision"), `a public answer is a fallback copy: ${show(shared)}`).toBe(
      "fallback",
    );
    expect(shared.text).toBe(pub.text);

    // fallback_cookies = "shared": the cookie page is kept, the Authorization one still is not
    const cookiePage = await at(sharedCookies, "http://sluice.test/shared-acct/home", A, { cookie: "session=alice" });
    expect(cookiePage.headers.get("sluice-decision"), show(cookiePage)).toBe("allow");
    const cookieCopy = await untilFallback(() => at(sharedCookies, "http://sluice.test/shared-acct/home", B));
    expect(
      cookieCopy.headers.get("sluice-decision"),
      `fallback_cookies = "shared" keeps the cookie request's copy: ${show(cookieCopy)}`,
    ).toBe("fallback");
    expect(cookieCopy.text).toBe(cookiePage.text);
    const authPage = await at(sharedCookies, "http://sluice.test/shared-acct/auth", A, {
      authorization: "Bearer alice",
    });
    expect(authPage.headers.get("sluice-decision"), show(authPage)).toBe("allow");
    await sleep(400);
    const authCopy = await at(sharedCookies, "http://sluice.test/shared-acct/auth", B);
    expect(authCopy.status, `fallback_cookies does not cover Authorization: ${show(authCopy)}`).toBe(429);
  });
});

describe("5. copies are per host, and Vary is evaluated on what the origin received", () => {
  it("tenant-b never gets tenant-a's copy, and a Vary on X-Forwarded-For keeps each client's variant apart", async () => {
    const a = await at(mf, "http://tenant-a.test/shop/x", "203.0.113.31");
    expect(a.headers.get("sluice-decision"), show(a)).toBe("allow");
    const aCopy = await untilFallback(() => at(mf, "http://tenant-a.test/shop/x", "203.0.113.31"));
    expect(aCopy.headers.get("sluice-decision"), `tenant-a's own copy: ${show(aCopy)}`).toBe("fallback");
    const b = await at(mf, "http://tenant-b.test/shop/x", "203.0.113.32");
    expect(b.status, `tenant-b must not get tenant-a's page: ${show(b)}`).toBe(429);
    expect(b.headers.get("sluice-decision")).toBe("reject");

    const url = "http://tenant-a.test/shop/v?vary=x-forwarded-for";
    const ip1 = "203.0.113.33";
    const ip2 = "203.0.113.34";
    const first = await at(mf, url, ip1);
    expect(first.headers.get("sluice-decision"), show(first)).toBe("allow");
    expect(first.json().varied, "sluice sets X-Forwarded-For to the client IP").toBe(ip1);
    const own = await untilFallback(() => at(mf, url, ip1));
    expect(own.headers.get("sluice-decision"), `ip1's own variant: ${show(own)}`).toBe("fallback");
    expect(own.json().varied).toBe(ip1);
    const other = await at(mf, url, ip2);
    expect(other.status, `ip2 has no variant of its own and must not get ip1's: ${show(other)}`).toBe(429);
    expect(other.headers.get("sluice-decision")).toBe("reject");
  });
});
