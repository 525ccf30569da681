import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, startOrigin, type DemoOrigin } from "@sluice/dev";
import { countedApp, from, middlewareRig, TIMEOUT_MS } from "../../../test/support/middleware-rig.js";
import { sluice, type SluiceConfig } from "../../index.js";

/**
 * `on_limit = "divert"` through sluice(config) in an app, in Node: with `origin` (the gateway as
 * middleware: two demo origins, the main one and the divert one), and without (the app's handler
 * is the main origin). test/integration/divert-worker.test.ts covers the same in workerd.
 */
const { connection, prefix } = middlewareRig("divert");
let main: DemoOrigin;
let replica: DemoOrigin;
let down: string;
beforeAll(async () => {
  [main, replica] = await Promise.all([startOrigin(), startOrigin()]);
  // nothing listens there: a divert origin that is down
  down = `http://127.0.0.1:${await freePort()}`;
});
afterAll(async () => {
  await Promise.all([main?.close(), replica?.close()]);
});

type Route = NonNullable<SluiceConfig["routes"]>[number];

/** A divert route on /reads/*, one request per client an hour, diverting to `url`. */
const reads = (url: string, extra: Partial<Route> = {}): Route => ({
  name: "reads",
  match: "/reads/*",
  on_limit: "divert",
  divert_url: url,
  limits: [{ name: "per-ip", rate: 1, period: "1h", burst: 1, lease: false }],
  ...extra,
});

/** sluice(config) in front of a handler that stands for the origin when `origin` is not given. */
function appWith(route: Route, origin?: string) {
  const config: SluiceConfig = { key_prefix: prefix(), timeout_ms: TIMEOUT_MS, routes: [route] };
  return countedApp(sluice(config, { ...connection(), origin }), (c) => c.text(`handler ${c.req.path}`));
}

describe('on_limit = "divert" with an origin', () => {
  it("sends the refused request to divert_url, marked diverted, with the refusing limit's RateLimit headers", async () => {
    const { app } = appWith(reads(`${replica.url}/mirror`), main.url);
    const allowed = await app.request("/reads/a?x=1", from("198.51.100.1"));
    expect(allowed.headers.get("Sluice-Decision")).toBe("allow");
    expect(await allowed.json()).toMatchObject({ path: "/reads/a", query: "?x=1" });
    const mainHits = main.seen.length;
    const res = await app.request("/reads/a?x=1", from("198.51.100.1", { "sluice-session": "forged" }));
    expect(res.status).toBe(200);
    expect(res.headers.get("Sluice-Decision")).toBe("diverted");
    expect(res.headers.get("RateLimit")).toMatch(/^"per-ip";r=0;t=\d+$/);
    expect(await res.json()).toMatchObject({ path: "/mirror/reads/a", query: "?x=1" });
    expect(main.seen.length).toBe(mainHits);
    const seen = replica.seen.at(-1)!;
    expect(seen.headers["x-forwarded-for"]).toBe("198.51.100.1");
    expect(seen.headers["sluice-session"]).toBeUndefined();
  });

  it("answers with the static fallback page when the divert origin is down", async () => {
    const { app } = appWith(reads(down, { fallback: { body: "back soon" } }), main.url);
    expect((await app.request("/reads/b", from("198.51.100.2"))).status).toBe(200);
    const res = await app.request("/reads/b", from("198.51.100.2"));
    expect(res.status).toBe(200);
    expect(res.headers.get("Sluice-Decision")).toBe("fallback");
    expect(res.headers.get("RateLimit")).toMatch(/^"per-ip";r=0;t=\d+$/);
    expect(await res.text()).toBe("back soon");
  });

  it("answers with the 429 problem when the divert origin answers 5xx and there is no fallback page", async () => {
    const { app } = appWith(reads(replica.url), main.url);
    expect((await app.request("/reads/c", from("198.51.100.3"))).status).toBe(200);
    const res = await app.request("/reads/c?status=500", from("198.51.100.3"));
    expect(res.status).toBe(429);
    expect(res.headers.get("Sluice-Decision")).toBe("reject");
    expect(((await res.json()) as { limit: string }).limit).toBe("per-ip");
  });

  it("gives up on a divert origin slower than divert_timeout", async () => {
    const { app } = appWith(reads(replica.url, { divert_timeout: "200ms", fallback: { body: "later" } }), main.url);
    expect((await app.request("/reads/d", from("198.51.100.4"))).status).toBe(200);
    const started = Date.now();
    const res = await app.request("/reads/d?delay=5000", from("198.51.100.4"));
    expect(await res.text()).toBe("later");
    // abandoned at the timeout: answered before the divert origin would have (however slow the machine)
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});

describe('on_limit = "divert" in an app (the handler is the main origin)', () => {
  it("answers a refused request from divert_url without calling the handler", async () => {
    const { app, calls } = appWith(reads(replica.url));
    expect(await (await app.request("/reads/e", from("198.51.100.5"))).text()).toBe("handler /reads/e");
    const res = await app.request("/reads/e", from("198.51.100.5"));
    expect(res.headers.get("Sluice-Decision")).toBe("diverted");
    expect(await res.json()).toMatchObject({ origin: "demo", path: "/reads/e" });
    expect(calls.n).toBe(1);
  });
});
