/**
 * Method-override headers (`X-HTTP-Method-Override`, `X-HTTP-Method`, `X-Method-Override`),
 * replayed over raw HTTP/1.1 through the gateway in workerd against a real Redis: a POST that asks
 * to be a DELETE must not reach the origin as one past a DELETE-scoped limit. By default the
 * headers are stripped; a route with `method_override = true` decides on the overridden method
 * (limits, idempotency, route matching) and forwards the header.
 */
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { useStack } from "../integration/stack.js";
import { portOf, rawRequest, type RawHeader } from "../support/raw-http.js";

const OVERRIDES = ["X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"];
const oneAnHour = [{ name: "per-ip", key: "ip", rate: 1, period: "1h" }];

/** No route opts in: the default. */
const SLUICE: SluiceInput = {
  key_prefix: "smo",
  timeout_ms: 2_000,
  routes: [{ name: "deletes", match: "/items/*", methods: ["DELETE"], limits: oneAnHour }],
};

/** Routes that opt in, in a Worker of their own (on the same Redis and origin). */
const HONOURING: SluiceInput = {
  key_prefix: "smh",
  timeout_ms: 2_000,
  routes: [
    { name: "honoured", match: "/docs/*", methods: ["DELETE"], method_override: true, limits: oneAnHour },
    {
      name: "jobs",
      match: "/jobs/*",
      methods: ["DELETE"],
      method_override: true,
      idempotency: { required: true, methods: ["DELETE"] },
    },
  ],
};

const rig = useStack({ sluice: SLUICE, listen: true });
let port: number;
let honouringPort: number;
beforeAll(async () => {
  port = portOf(await rig.mf.ready);
  honouringPort = portOf(await rig.worker({ sluice: HONOURING, listen: true }).ready);
});

const sendTo =
  (to: () => number) =>
  (method: string, target: string, ip: string, headers: RawHeader[] = []) =>
    rawRequest({ port: to(), method, target, headers: [["CF-Connecting-IP", ip], ...headers], body: "" });
const send = sendTo(() => port);
const sendHonouring = sendTo(() => honouringPort);

/** What the origin was sent for `path`, last first. */
const seenAt = (path: string) => rig.origin.seen.filter((s) => s.path === path).reverse();
const overrideHeadersOf = (headers: Record<string, unknown>) =>
  Object.keys(headers).filter((h) => OVERRIDES.some((o) => o.toLowerCase() === h));

describe("by default the override headers are stripped", () => {
  it.each(OVERRIDES)(
    "a POST with %s: DELETE past an empty DELETE limit reaches the origin as a plain POST",
    async (h) => {
      const ip = `198.51.100.${OVERRIDES.indexOf(h) + 1}`;
      const path = `/items/${OVERRIDES.indexOf(h) + 1}`;
      expect((await send("DELETE", path, ip)).status).toBe(200);
      expect((await send("DELETE", path, ip)).status).toBe(429);

      // written as an attacker would: any case, surrounding whitespace
      const r = await send("POST", path, ip, [`${h.toLowerCase()}:  delete \t`]);
      expect(r.status).toBe(200);
      const [seen] = seenAt(path);
      expect(seen?.method).toBe("POST");
      expect(overrideHeadersOf(seen!.headers)).toEqual([]);
    },
  );

  it("all three at once are stripped too, and the request stays what it was sent as", async () => {
    const r = await send(
      "POST",
      "/elsewhere",
      "198.51.100.9",
      OVERRIDES.map((h): RawHeader => [h, "DELETE"]),
    );
    expect(r.status).toBe(200);
    const [seen] = seenAt("/elsewhere");
    expect(seen?.method).toBe("POST");
    expect(overrideHeadersOf(seen!.headers)).toEqual([]);
  });
});

describe("a route with method_override = true decides on the overridden method", () => {
  it("a POST overriding to DELETE spends the DELETE limit and reaches the origin with its header", async () => {
    const ip = "198.51.100.20";
    expect((await sendHonouring("DELETE", "/docs/1", ip)).status).toBe(200);
    // the bucket is empty: the override is the DELETE it asks to be, and is refused as one
    const refused = await sendHonouring("POST", "/docs/1", ip, [["X-HTTP-Method-Override", "DELETE"]]);
    expect(refused.status).toBe(429);

    const other = await sendHonouring("POST", "/docs/2", "198.51.100.21", [["X-HTTP-Method-Override", "delete"]]);
    expect(other.status).toBe(200);
    const [seen] = seenAt("/docs/2");
    expect(seen?.headers["x-http-method-override"]).toBe("delete");
    // and it spent that client's DELETE bucket
    expect((await sendHonouring("DELETE", "/docs/2", "198.51.100.21")).status).toBe(429);
  });

  it("headers that disagree are not honoured: stripped, and the POST is decided as a POST", async () => {
    const ip = "198.51.100.22";
    expect((await sendHonouring("DELETE", "/docs/3", ip)).status).toBe(200);
    const r = await sendHonouring("POST", "/docs/3", ip, [
      ["X-HTTP-Method-Override", "DELETE"],
      ["X-HTTP-Method", "PATCH"],
    ]);
    expect(r.status).toBe(200);
    const [seen] = seenAt("/docs/3");
    expect(seen?.method).toBe("POST");
    expect(overrideHeadersOf(seen!.headers)).toEqual([]);
  });

  it("idempotency scoped to DELETE guards the overriding POST: a key is required, a duplicate replays", async () => {
    const ip = "198.51.100.23";
    const override: RawHeader = ["X-HTTP-Method-Override", "DELETE"];
    expect((await sendHonouring("POST", "/jobs/1", ip, [override])).status).toBe(400);
    const first = await sendHonouring("POST", "/jobs/1", ip, [override, ["Idempotency-Key", "mo-key-1"]]);
    expect(first.status).toBe(200);
    const again = await sendHonouring("POST", "/jobs/1", ip, [override, ["Idempotency-Key", "mo-key-1"]]);
    expect(again.status).toBe(200);
    expect(again.headers["idempotent-replayed"]).toBe("true");
    expect(seenAt("/jobs/1")).toHaveLength(1);
  });
});
