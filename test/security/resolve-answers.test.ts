/**
 * Finding 16 of issue 29: `POST /__sluice/idempotency/resolve` stored answers it could not replay.
 * A `101`, a `204` with a body or a content type with a line break made every duplicate a `500`
 * for the key's ttl; `€` in a body was a `500` of the resolve itself, and `café` was replayed
 * mangled (one Latin-1 byte where UTF-8 has two). Now the resolve takes a final status (200–599),
 * no body where the status (or a HEAD-only route) forbids one, a header-safe content type, and
 * stores the body's UTF-8 bytes as the gateway stores an origin's answer.
 */
import { describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { call, useStack } from "../integration/stack.js";

const ADMIN = "resolve-answers-admin-token-0123";
const SLUICE: SluiceInput = {
  key_prefix: "ra",
  timeout_ms: 2_000,
  routes: [
    { name: "held", match: "/held", idempotency: { on_origin_error: "hold" } },
    { name: "heads", match: "/heads", idempotency: { on_origin_error: "hold", methods: ["HEAD"] } },
  ],
};

const rig = useStack({ sluice: SLUICE, bindings: { SLUICE_ADMIN_TOKEN: ADMIN } });
const bearer = { authorization: `Bearer ${ADMIN}` };

const post = (key: string, headers: Record<string, string> = {}) =>
  call(rig.mf, "/held", {
    method: "POST",
    body: "{}",
    headers: { "content-type": "application/json", "idempotency-key": key, ...headers },
  });

const resolve = (body: Record<string, unknown>) =>
  call(rig.mf, "/__sluice/idempotency/resolve", {
    method: "POST",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json", ...bearer },
  });

/** The key hashes already handed out, so that each call finds its own key's entry. */
const taken = new Set<string>();

/** A key of `route` the origin failed (500) under `hold`: indeterminate; its hash as the ledger shows it. */
async function indeterminate(route: string, key: string, method = "POST"): Promise<string> {
  const headers: Record<string, string> = { "idempotency-key": key, "x-demo-status": "500" };
  if (method === "POST") headers["content-type"] = "application/json";
  const body = method === "POST" ? "{}" : undefined;
  expect((await call(rig.mf, `/${route}`, { method, body, headers })).status).toBe(500);
  // the hold is written after the response (waitUntil): the ledger has it once it landed
  for (let i = 0; i < 50; i++) {
    const entries = (await call(rig.mf, `/__sluice/ledger?route=${route}&count=50`, { headers: bearer })).json()
      .entries as Array<Record<string, string>>;
    const entry = entries.find((e) => e.event === "indeterminate" && e.key !== undefined && !taken.has(e.key));
    if (entry?.key !== undefined) {
      taken.add(entry.key);
      return entry.key;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no indeterminate entry for ${key}`);
}

describe("the operator's replay answer is one every duplicate can be given", () => {
  it("refuses statuses that cannot be replayed (1xx), naming `status`; the key stays held", async () => {
    const key = await indeterminate("held", "ra-101");
    for (const status of [101, 100, 199]) {
      const r = await resolve({ route: "held", key, action: "replay", status, body: "" });
      expect(r.status).toBe(400);
      expect(r.json().detail).toMatch(/^status: /);
    }
    // never stored: a duplicate is still told the outcome is indeterminate, never a 500
    const dup = await post("ra-101");
    expect(dup.status).toBe(409);
    expect(dup.json()).toMatchObject({ title: "Outcome indeterminate" });
  });

  it("refuses a body with 204, 205 and 304, and on a HEAD-only route; takes those statuses without one", async () => {
    const key = await indeterminate("held", "ra-204");
    for (const status of [204, 205, 304]) {
      const r = await resolve({ route: "held", key, action: "replay", status, body: "x" });
      expect(r.status).toBe(400);
      expect(r.json().detail).toMatch(/^body: /);
    }
    expect((await post("ra-204")).status).toBe(409);
    expect((await resolve({ route: "held", key, action: "replay", status: 204 })).status).toBe(200);
    const replayed = await post("ra-204");
    expect([replayed.status, replayed.text, replayed.headers.get("idempotent-replayed")]).toEqual([204, "", "true"]);

    const head = await indeterminate("heads", "ra-head", "HEAD");
    const r = await resolve({ route: "heads", key: head, action: "replay", status: 200, body: "x" });
    expect(r.status).toBe(400);
    expect(r.json().detail).toMatch(/^body: .*HEAD/);
  });

  it("refuses a content type a response cannot carry (a line break)", async () => {
    const key = await indeterminate("held", "ra-ct");
    const r = await resolve({
      route: "held",
      key,
      action: "replay",
      content_type: "text/plain\r\nx-evil: 1",
      body: "ok",
    });
    expect(r.status).toBe(400);
    expect(r.json().detail).toMatch(/^content_type: /);
    expect((await post("ra-ct")).status).toBe(409);
  });

  it("stores the body's UTF-8 bytes: `€` and `café` are replayed as given", async () => {
    for (const [name, body] of [
      ["ra-euro", '{"price":"12 €"}'],
      ["ra-cafe", "café ☕ 𝄞"],
    ] as const) {
      const key = await indeterminate("held", name);
      const r = await resolve({
        route: "held",
        key,
        action: "replay",
        status: 201,
        body,
        content_type: "text/plain; charset=utf-8",
      });
      expect(r.status).toBe(200);
      const replayed = await post(name);
      expect(replayed.status).toBe(201);
      expect(replayed.headers.get("idempotent-replayed")).toBe("true");
      expect(replayed.headers.get("content-type")).toBe("text/plain; charset=utf-8");
      expect(replayed.text).toBe(body);
    }
  });
});
