import { readFileSync } from "node:fs";
import type { Miniflare } from "miniflare";
import { parse } from "smol-toml";
import { beforeAll, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { orderOnce } from "../../examples/mcp/agent.js";
import { startShop, type Shop } from "../../examples/mcp/server.js";
import { useStack } from "./stack.js";

/**
 * examples/mcp/ as it is written: its wrangler.toml's configuration in front of its SDK server,
 * its agent calling create_order from two sessions: one order, both told it was created.
 */
const example = parse(readFileSync("examples/mcp/wrangler.toml", "utf8")) as { vars: { SLUICE: SluiceInput } };
let shop: Shop;
const rig = useStack({
  sluice: example.vars.SLUICE,
  listen: true,
  origin: async () => {
    shop = await startShop(0);
    return shop;
  },
});
let base: URL;
beforeAll(async () => {
  base = await (rig.mf as Miniflare).ready;
});

it("the example's agent orders twice through the example's sluice: one order", async () => {
  const url = new URL("/mcp", base).href;
  const first = await orderOnce(url, 60_000);
  const retry = await orderOnce(url, 60_000);
  expect(first).toBe("order for 1 x sku-42 created");
  expect(retry).toBe(first);
  expect(shop.orders.get("sku-42")).toBe(1);
});
