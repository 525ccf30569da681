/**
 * REVIEW (h-review, adversarial read of issue 29's fixes). FAILS on main at e95bf24.
 *
 * R5. A session's lock is released as soon as the origin's reply is in hand, whatever it says:
 *     also when the outcome is unknown: a connection broken after the request was read (a proxy's
 *     reset while the application goes on), or a timeout whose late answer never came (released
 *     after the 25 s wait, the origin's request aborted but not its work). The session's next call
 *     then runs beside the first at the origin. The idempotency claim holds such a key
 *     indeterminate; the lock, held for "one call per session at a time", is given back at once.
 *     Suggested: on an unknown outcome, stop renewing and let the lease run out (no release).
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, useStack } from "../integration/stack.js";

/** An application behind a proxy that cuts the connection: `/cut` reads the request, drops the socket, and works on until `finish()`. */
interface CuttingOrigin {
  url: string;
  running: number;
  overlaps: number;
  finish(): void;
  close(): Promise<void>;
}

async function startCuttingOrigin(): Promise<CuttingOrigin> {
  const o = { running: 0, overlaps: 0 };
  const pending: Array<() => void> = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (o.running > 0) o.overlaps++;
      if ((req.url ?? "").includes("/cut")) {
        o.running++;
        pending.push(() => o.running--);
        req.socket.destroy();
        return;
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{}");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get running() {
      return o.running;
    },
    get overlaps() {
      return o.overlaps;
    },
    finish: () => pending.splice(0).forEach((f) => f()),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const SLUICE: SluiceInput = {
  key_prefix: "rsu",
  timeout_ms: 5_000,
  routes: [{ name: "agent", match: "/agent/*", methods: ["POST"], session: { key: "header:x-session-id" } }],
};

const rig = useStack({ sluice: SLUICE, origin: startCuttingOrigin });
let mf: Miniflare;
beforeAll(() => {
  mf = rig.mf;
});

const post = (path: string) =>
  call(mf, path, {
    method: "POST",
    ip: "203.0.113.94",
    body: "{}",
    headers: { "content-type": "application/json", "x-session-id": "s-r5" },
  });

describe("REVIEW R5: a session call whose outcome is unknown", () => {
  it("keeps the session's lock: the next call must not run beside it at the origin", async () => {
    const first = await post("/agent/cut");
    expect(first.status, first.text).toBe(502);
    expect(rig.origin.running, "the first call still works at the origin").toBe(1);
    const next = await post("/agent/next");
    rig.origin.finish();
    expect(
      rig.origin.overlaps,
      `the session's next call ran beside the first (answered ${next.status}); it must be refused (409) or wait`,
    ).toBe(0);
  }, 30_000);
});
