/**
 * One client must not be able to collapse a route's adaptive in-flight limit for everybody
 * (docs/algorithms.md, Adaptive limit, and docs/security.md). Replayed through the Worker in workerd with real
 * Redis:
 * - an anonymous client hammers a route whose origin refuses it with 429 (its own per-user limit)
 *   while eight others use it normally: the learnt limit must not fall, and the eight, sent at once
 *   afterwards, must all be admitted (the 429s counted as overload drove 16 to 1 in seconds);
 * - clients that dribble their request bodies (a byte every 400 ms, each on its own connection)
 *   in front of an origin that answers at once: the upload is theirs, not the origin's latency,
 *   so the limit must not fall (measured from the request's start, it halved every window).
 * Bounded: a few hundred requests, each phase capped in time; no latency is asserted.
 */
import { createServer, request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack, type Closable } from "../integration/stack.js";
import { portOf } from "../support/raw-http.js";

const ADMIN = "adaptive-admin-token-0123456789";
const ATTACKER = "203.0.113.66";
const OTHERS = Array.from({ length: 8 }, (_, i) => `198.51.100.${i + 1}`);
const INITIAL = 16;

const SLUICE: SluiceInput = {
  key_prefix: "sac",
  // decisions are Redis's even on a loaded machine (a degraded one would not limit)
  timeout_ms: 2_000,
  routes: [
    // a target far above what the origin takes: only failures (or a stretched latency) move the limit
    {
      name: "shared",
      match: "/shared/*",
      adaptive: { target: "3s", interval: "500ms", initial: INITIAL, min: 1, max: 32 },
    },
    {
      name: "upload",
      match: "/upload/*",
      methods: ["POST"],
      // far above what the origin takes even on a loaded machine, far below a dribbled upload
      adaptive: { target: "2s", interval: "500ms", initial: INITIAL, min: 1, max: 32 },
    },
  ],
};

/** What the origin saw of an upload: the body's length and how it was framed. */
interface Upload {
  bytes: number;
  contentLength?: string;
  chunked: boolean;
}

interface TestOrigin extends Closable {
  url: string;
  uploads: Upload[];
}

/**
 * The origin: refuses the attacker with 429 at once (as its per-user limit would), answers
 * everybody else 200 after `x-delay` ms (default 5) once it has the whole body.
 */
async function startTestOrigin(): Promise<TestOrigin> {
  const uploads: Upload[] = [];
  const server: Server = createServer((req, res) => {
    let bytes = 0;
    req.on("data", (c: Buffer) => (bytes += c.length));
    req.on("end", () => {
      if (req.headers["x-real-ip"] === ATTACKER)
        return void res.writeHead(429, { "retry-after": "60" }).end("slow down");
      if (req.method === "POST") {
        const chunked = /chunked/i.test(String(req.headers["transfer-encoding"] ?? ""));
        uploads.push({ bytes, contentLength: req.headers["content-length"], chunked });
      }
      setTimeout(
        () => res.writeHead(200, { "content-type": "text/plain" }).end("ok"),
        Number(req.headers["x-delay"] ?? 5),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    uploads,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const rig = useStack({
  sluice: SLUICE,
  listen: true,
  bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
  origin: startTestOrigin,
});

/** The route's learnt limit in the home region, as the admin API shows it (undefined: no state yet). */
async function learntLimit(route: string): Promise<number | undefined> {
  const r = await call(rig.mf, "/__sluice/api/dashboard", { headers: { authorization: `Bearer ${ADMIN}` } });
  expect(r.status).toBe(200);
  const data = r.json() as { routes: Array<{ route: string; adaptive?: Array<{ limit: number }> }> };
  return data.routes.find((x) => x.route === route)?.adaptive?.[0]?.limit;
}

/** Each of `ips` requests `path` in a loop (a pause of `pauseMs` between) until `done()`; the statuses. */
async function loop(ips: readonly string[], path: string, done: () => boolean, pauseMs: number): Promise<number[]> {
  const statuses: number[] = [];
  await Promise.all(
    ips.map(async (ip, k) => {
      for (let i = 0; !done(); i++) {
        statuses.push((await call(rig.mf, `${path}${k}-${i}`, { ip })).status);
        await sleep(pauseMs);
      }
    }),
  );
  return statuses;
}

/** A POST whose 8-byte body is written a byte every `gapMs` over its own connection; its status. */
function dribble(port: number, ip: string, gapMs: number): Promise<number> {
  const body = "12345678";
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: "127.0.0.1",
        port,
        method: "POST",
        path: "/upload/slow",
        headers: { "CF-Connecting-IP": ip, "Content-Length": String(body.length), connection: "close" },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      },
    );
    req.on("error", reject);
    req.setTimeout(15_000, () => req.destroy(new Error("no answer within 15 s")));
    void (async () => {
      for (const byte of body) {
        req.write(byte);
        await sleep(gapMs);
      }
      req.end();
    })();
  });
}

describe("one client cannot collapse the adaptive limit for everybody", () => {
  it("a client the origin refuses with 429, hammering the route (300 requests): the limit stays, and 8 other clients at once are all admitted", async () => {
    await call(rig.mf, "/shared/warm", { ip: OTHERS[0] });
    // the attacker: 8 at a time, 300 requests (20 s at most, for a loaded machine); meanwhile the
    // others: one request every 100 ms each
    const until = Date.now() + 20_000;
    let sent = 0;
    let attacking = true;
    const attack = Promise.all(
      Array.from({ length: 8 }, async (_, k) => {
        while (Date.now() < until && sent < 300) {
          sent += 1;
          await call(rig.mf, `/shared/a${k}-${sent}`, { ip: ATTACKER });
        }
      }),
    ).finally(() => (attacking = false));
    const honest = await loop(OTHERS, "/shared/h", () => !attacking, 100);
    await attack;
    expect(sent).toBeGreaterThanOrEqual(100);
    expect(honest.filter((s) => s !== 200)).toEqual([]);
    await sleep(500); // the last deferred reports land
    expect(await learntLimit("shared")).toBeGreaterThanOrEqual(INITIAL);
    // eight other clients at once, each held 500 ms by the origin: every one is admitted
    const statuses = await Promise.all(
      OTHERS.map((ip, i) => call(rig.mf, `/shared/after${i}`, { ip, headers: { "x-delay": "500" } })),
    );
    expect(statuses.map((r) => r.status)).toEqual(OTHERS.map(() => 200));
  }, 60_000);

  it("clients that dribble their bodies (a byte every 400 ms), 24 uploads: their upload is no origin latency, the limit stays; the origin still gets a Content-Length", async () => {
    const port = portOf(await rig.mf.ready);
    // six clients, four uploads each, one after another (50 s at most, for a loaded machine)
    const until = Date.now() + 50_000;
    const statuses: number[] = [];
    await Promise.all(
      OTHERS.slice(0, 6).map(async (ip) => {
        for (let i = 0; i < 4 && Date.now() < until; i++) statuses.push(await dribble(port, ip, 400));
      }),
    );
    expect(statuses.length).toBeGreaterThanOrEqual(20);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    await sleep(500); // the last deferred reports land
    const limit = await learntLimit("upload");
    // the reports went in (the state exists), and 3.2 s uploads did not pass for origin latency
    expect(limit).toBeDefined();
    expect(limit).toBeGreaterThanOrEqual(INITIAL);
    const uploads = rig.origin.uploads;
    expect(uploads.length).toBeGreaterThanOrEqual(20);
    expect(uploads.every((u) => u.bytes === 8 && u.contentLength === "8" && !u.chunked)).toBe(true);
  }, 90_000);
});
