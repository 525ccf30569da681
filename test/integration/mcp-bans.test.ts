import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { startMcpOrigin, type McpOrigin } from "../support/mcp-server.js";
import { call, sleep, useStack } from "./stack.js";

/**
 * A refused tool call counts toward its limit's ban as a refused request does: the MCP step is
 * handed the ban count where the steps are composed (`mcpStep(banOnRefusal)`, src/pipeline/steps.ts),
 * so a gateway wired without it would let an agent hammer a refused tool for ever.
 */
const SLUICE: SluiceInput = {
  key_prefix: "mcpban",
  timeout_ms: 10_000, // decisions are Redis's, even when a loaded machine stalls
  routes: [
    {
      name: "tools",
      match: "/stateless-mcp",
      methods: ["POST"],
      mcp: { pass: ["quota_probe"] },
      limits: [
        {
          name: "probes",
          key: "ip",
          tools: ["quota_probe"],
          rate: 1,
          period: "1h",
          ban: { after: 2, within: "1m", for: ["2m"] },
        },
      ],
    },
  ],
};

const ADMIN = "mcp-bans-admin-token-0123456789";

let origin: McpOrigin;
const rig = useStack({
  sluice: SLUICE,
  bindings: { SLUICE_ADMIN_TOKEN: ADMIN },
  origin: async () => {
    origin = await startMcpOrigin();
    return origin;
  },
});

const probe = (ip: string, id: number) =>
  call(rig.mf, "/stateless-mcp", {
    method: "POST",
    ip,
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2025-11-25",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "quota_probe", arguments: {} } }),
  });

describe("bans through the MCP gateway", () => {
  it("an agent refused `after` times is banned: its next POST is a 403 from the deny list, another agent is not", async () => {
    const ip = "198.51.100.77";
    expect((await probe(ip, 1)).status).toBe(200);
    const refusals = [await probe(ip, 2), await probe(ip, 3)];
    for (const r of refusals) expect(r.text).toContain('limit \\"probes\\"');
    // the ban is written after the response: ask until it is in force (bounded tries, no clock)
    let status = 200;
    for (let i = 0; i < 80 && status !== 403; i++) {
      status = (await probe(ip, 10 + i)).status;
      if (status !== 403) await sleep(100);
    }
    expect(status).toBe(403);
    expect(origin.runs("quota_probe")).toBe(1);
    expect((await probe("198.51.100.78", 1)).status).toBe(200);
  });
});

describe("allow entries through the MCP gateway", () => {
  it("an allow-listed agent's tool calls are not limited (limitsWaived): every call runs", async () => {
    const ip = "198.51.100.90";
    const marker = "192.0.2.90";
    for (const [kind, entry] of [
      ["allow", ip],
      ["deny", marker],
    ]) {
      const res = await call(rig.mf, "/__sluice/lists", {
        method: "PUT",
        headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
        body: JSON.stringify({ kind, entry, ttl: "10m" }),
      });
      expect(res.status, res.text).toBeLessThan(300);
    }
    // the isolate reads the lists again every few seconds: the marker denied in the same writes tells when it has
    let status = 0;
    for (let i = 0; i < 100 && status !== 403; i++) {
      status = (await probe(marker, i)).status;
      if (status !== 403) await sleep(100);
    }
    expect(status).toBe(403);
    const before = origin.runs("quota_probe");
    // "probes" allows one call an hour per IP: an allow-listed client is not counted
    for (let i = 0; i < 3; i++) {
      const res = await probe(ip, 100 + i);
      expect(res.status).toBe(200);
      expect(res.text).not.toContain('limit \\"probes\\"');
    }
    expect(origin.runs("quota_probe")).toBe(before + 3);
  });
});
