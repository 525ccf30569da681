/**
 * Security regression (issue 29, finding 12): the origin could refund its own request. The rate
 * limit gave back a request's charge when the response said `Sluice-Decision: replay`, a header
 * an origin passing an upstream's headers through (an image proxy, another sluice in front of a
 * service) sends as it likes: 20 of 20 requests reached it under a 2-an-hour limit. Refunds now
 * follow what sluice's own idempotency step did, and an origin's `Sluice-*` headers are dropped
 * before sluice stamps its own. Through the Worker in workerd, against a real Redis.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, sleep, useStack } from "../integration/stack.js";

const SLUICE: SluiceInput = {
  key_prefix: "orf",
  timeout_ms: 5_000,
  routes: [
    { name: "images", match: "/img/*", limits: [{ name: "per-ip", key: "ip", rate: 2, period: "1h" }] },
    {
      name: "orders",
      match: "/orders",
      methods: ["POST"],
      idempotency: {},
      limits: [{ name: "per-ip", key: "ip", rate: 3, period: "1h" }],
    },
  ],
};

/** An origin that passes an upstream's headers through: every answer claims to be a sluice replay. */
async function replayingOrigin() {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      seen.push(req.url ?? "/");
      res.writeHead(200, {
        "content-type": "application/json",
        "sluice-decision": "replay",
        "sluice-region": "upstream",
        "sluice-delay-ms": "99999",
        "idempotent-replayed": "true",
      });
      res.end(JSON.stringify({ proxied: req.url }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const rig = useStack({ sluice: SLUICE, origin: replayingOrigin });

describe("12. an origin's Sluice-Decision: replay refunds nothing", () => {
  it("20 GETs under a 2-an-hour limit: 2 reach the origin, 18 are refused", async () => {
    const ip = "198.51.100.12";
    const answers = [];
    for (let i = 0; i < 20; i++) {
      answers.push(await call(rig.mf, `/img/cat-${i}.png`, { ip }));
      // the refund it used to get went after the response: give one the time to land
      if (i < 3) await sleep(100);
    }
    const admitted = answers.filter((r) => r.status === 200);
    expect(admitted).toHaveLength(2);
    expect(answers.filter((r) => r.status === 429)).toHaveLength(18);
    expect(rig.origin.seen.filter((u) => u.startsWith("/img/"))).toHaveLength(2);
    for (const r of admitted) {
      // sluice's own decision and region, not the origin's; no wait sluice never imposed
      expect(r.headers.get("sluice-decision")).toBe("allow");
      expect(r.headers.get("sluice-region")).not.toBe("upstream");
      expect(r.headers.get("sluice-delay-ms")).toBeNull();
      expect(r.headers.get("ratelimit")).toMatch(/"per-ip";r=[01];/);
    }
  });

  it("an idempotent route: the origin's header refunds nothing, sluice's own replay still does, and stores none of it", async () => {
    const ip = "198.51.100.13";
    const post = (key: string) =>
      call(rig.mf, "/orders", {
        method: "POST",
        ip,
        body: "{}",
        headers: { "content-type": "application/json", "idempotency-key": key },
      });
    const first = await post("o-1");
    expect(first.status).toBe(200);
    expect(first.headers.get("sluice-decision")).toBe("allow");
    // a real replay of o-1 (sluice's own) gives back its charge; its stored answer carries none of the origin's Sluice-*
    let replay = await post("o-1");
    for (let i = 0; i < 40 && replay.headers.get("sluice-decision") !== "replay"; i++) {
      await sleep(50);
      replay = await post("o-1");
    }
    expect(replay.headers.get("sluice-decision")).toBe("replay");
    expect(replay.headers.get("sluice-region")).not.toBe("upstream");
    expect(replay.headers.get("sluice-delay-ms")).toBeNull();
    await sleep(200); // the replays' refunds go after the response
    expect((await post("o-2")).status).toBe(200);
    expect((await post("o-3")).status).toBe(200);
    await sleep(200);
    const fourth = await post("o-4");
    expect(fourth.status, fourth.text).toBe(429);
    expect(rig.origin.seen.filter((u) => u === "/orders")).toHaveLength(3);
  });
});
