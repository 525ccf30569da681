/**
 * Regression (issue 30, point 6): an invalid configuration answered every request, the public
 * `/__sluice/health` included, with a `500` problem telling any client the field and what is wrong
 * with it (`SLUICE.routes[0].limits[0].rate: …`). The configuration is the operator's: a client now
 * gets a plain `500` problem (still on every request: nothing is half-applied), while the log says
 * the field once per isolate and the admin API, asked with the admin token, names it.
 */
import type { Miniflare } from "miniflare";
import { beforeAll, describe, expect, it } from "vitest";
import { call, useStack } from "../integration/stack.js";

const ADMIN = "invalid-config-admin-token";
const rig = useStack();
let mf: Miniflare;
const logs: string[] = [];

beforeAll(async () => {
  const keep = (text: string) => logs.push(...text.split("\n").filter((line) => line.trim() !== ""));
  mf = rig.worker({
    sluice: {
      routes: [{ name: "orders", match: "/x", limits: [{ name: "per-ip", key: "ip", rate: 0, period: "1s" }] }],
    },
    bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
    stdout: keep,
    stderr: keep,
  });
  await mf.ready;
});

type Answer = Awaited<ReturnType<typeof call>>;
const show = (r: Answer) => `${r.status} ${r.text.slice(0, 300)}`;

describe("6. an invalid configuration", () => {
  it("answers every path, health included, with a plain 500 problem that names nothing of it", async () => {
    for (const [path, headers] of [
      ["/x", {}],
      ["/anything", {}],
      ["/__sluice/health", {}],
      ["/__sluice/health", { authorization: "Bearer not-the-token" }],
      ["/__sluice/config", {}],
    ] as Array<[string, Record<string, string>]>) {
      const r = await call(mf, path, { headers });
      expect(r.status, `${path} ${show(r)}`).toBe(500);
      expect(r.headers.get("content-type")).toBe("application/problem+json");
      expect(r.headers.get("sluice-decision")).toBe("reject");
      expect(r.json()).toMatchObject({ title: "Invalid sluice configuration" });
      expect(r.json()).not.toHaveProperty("field");
      expect(r.text, path).not.toMatch(/routes|limits|rate|orders|per-ip/);
    }
    expect(rig.origin.seen.some((s) => s.path === "/anything")).toBe(false);
  });

  it("tells the operator, asking with the admin token, the field and the problem", async () => {
    const r = await call(mf, "/__sluice/health", { headers: { authorization: `Bearer ${ADMIN}` } });
    expect(r.status, show(r)).toBe(500);
    expect(r.json()).toMatchObject({
      field: "SLUICE.routes[0].limits[0].rate",
      detail: expect.stringContaining("SLUICE.routes[0]"),
    });
  });

  it("is logged once per isolate, naming the field, however many requests met it", async () => {
    for (let i = 0; i < 100 && !logs.some((l) => l.includes("config_invalid")); i++)
      await new Promise((r) => setTimeout(r, 50));
    const told = logs.filter((l) => l.includes('"event":"config_invalid"'));
    expect(told, logs.join("\n")).toHaveLength(1);
    expect(told[0]).toContain('"field":"SLUICE.routes[0].limits[0].rate"');
  });
});
