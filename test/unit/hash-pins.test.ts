/**
 * Every hash a Redis key name, a fingerprint, a derived key or a shown id is made of, pinned to
 * the values the code gave before the digest, canonical JSON and identity hash were each written
 * once (issue 31). A key name that changed on upgrade would lose a deployment's buckets and
 * records; a fingerprint or derived key that changed would turn a retry into a new order or a 422.
 * The expected values were computed by the code as it stood before that change: none may move.
 */
import { describe, expect, it } from "vitest";
import { loadConfig, type Limit } from "../../src/config/index.js";
import { keyFromFields, canonicalValue } from "../../src/features/guard/idempotency/derive.js";
import { canonicalBody, fingerprint } from "../../src/features/guard/idempotency/key.js";
import { recordRef } from "../../src/features/guard/idempotency/record-ref.js";
import { bucketHash } from "../../src/features/rate-limit/decision/buckets.js";
import { sessionRef } from "../../src/features/guard/session/lock.js";
import { clientOf } from "../../src/features/shedding/queue/depth.js";
import type { Store } from "../../src/store/redis.js";
import { Script } from "../../src/store/script.js";
import { sessionOf } from "../../src/admin/auth.js";
import { adminActor } from "../../src/operator/ledger.js";
import type { AdminEnv } from "../../src/operator/context.js";
import { Hono } from "hono";
import { hashIdentifier } from "../../src/identity/hash.js";
import type { RequestFacts } from "../../src/identity/identify.js";
import { autoPrincipal, principalOf } from "../../src/identity/principal.js";
import { pseudonym, type IdKey } from "../../src/identity/pseudonym.js";

const text = (s: string) => new TextEncoder().encode(s);
const decoded = (b: Uint8Array) => new TextDecoder().decode(b);

const facts = (headers: Record<string, string> = {}, claims?: Record<string, unknown>): RequestFacts => ({
  ip: "203.0.113.9",
  matchPath: "/orders",
  headers: new Headers(headers),
  url: new URL("https://api.test/orders?x=1"),
  ...(claims ? { claims } : {}),
});

function limitOf(key: unknown, scope = "region"): Limit {
  const loaded = loadConfig({
    ORIGIN_URL: "http://origin.test",
    SLUICE: {
      routes: [
        { name: "q", match: "/q", on_limit: "queue", limits: [{ name: "l", key, scope, rate: 1, period: "1s" }] },
      ],
    },
  });
  if (!loaded.ok) throw loaded.error;
  return loaded.config.routes[0]?.limits[0] as Limit;
}

const ID_KEY: IdKey = { secret: "pin-secret", source: "SLUICE_ID_KEY" };
const store = {} as Store;

describe("the canonical body an idempotency fingerprint and a derived key hash (key.ts canonicalBody)", () => {
  const canonical = (body: string | Uint8Array, ignore: readonly string[] = [], type = "application/json") =>
    decoded(canonicalBody(typeof body === "string" ? text(body) : body, type, ignore));

  it("sorts members at every depth, drops only top-level ignored members, keeps arrays in order", () => {
    expect(canonical('{ "b": 1, "a": [true, null, {"d": "x", "c": 1.50}] }')).toBe(
      '{"a":[true,null,{"c":1.5,"d":"x"}],"b":1}',
    );
    expect(canonical('{"ts": 123, "id": "x", "nested": {"ts": 1}}', ["ts"])).toBe('{"id":"x","nested":{"ts":1}}');
    expect(canonical('[{"ts": 1}]', ["ts"])).toBe('[{"ts":1}]');
    expect(canonical('{"__proto__": 1, "a": 2, "10": 0, "9": 0}')).toBe('{"10":0,"9":0,"__proto__":1,"a":2}');
    expect(canonical('{"__proto__": 1, "a": 2}', ["__proto__"])).toBe('{"a":2}');
    expect(canonical('{"a": 1, "a": 2}')).toBe('{"a":2}');
  });

  it("writes numbers as the double JSON.parse read, strings as JSON.stringify writes them", () => {
    expect(canonical('{"n": [1.0, 1e2, -0, 0.1, 1e400, 12345678901234567890, 9007199254740993]}')).toBe(
      '{"n":[1,100,0,0.1,null,12345678901234567000,9007199254740992]}',
    );
    expect(canonical('{"é": "ü", "a\\u0000": "\\ud800", "😀": 1, "z": "\\u2028", "e\\u0301": "/"}')).toBe(
      '{"a\\u0000":"\\ud800","e\u0301":"/","z":"\u2028","\u00e9":"\u00fc","\ud83d\ude00":1}',
    );
  });

  it("takes the body as it is when it is not JSON; a BOM and bad UTF-8 are read as TextDecoder reads them", () => {
    expect(canonical('{"b":1,"a":2}', [], "text/plain")).toBe('{"b":1,"a":2}');
    expect(canonical('{"b":1,')).toBe('{"b":1,');
    expect(canonical("")).toBe("");
    expect(canonical(new Uint8Array([0xef, 0xbb, 0xbf, ...text('{"b":1,"a":2}')]))).toBe('{"a":2,"b":1}');
    expect(canonical(new Uint8Array([...text('{"b":"'), 0xff, ...text('","a":1}')]))).toBe('{"a":1,"b":"\ufffd"}');
  });
});

describe("the key a route derives from body fields (derive.ts keyFromFields)", () => {
  it("is the same key and fingerprint as before", async () => {
    const derived = await keyFromFields(
      { method: "POST", path: "/orders", query: "?x=1" },
      text('{"user_id": 7, "items": [{"sku": "a", "qty": 1.0}], "note": "é"}'),
      { fields: ["/user_id", "/items", "/note"], window: 60_000 },
    );
    expect(derived.key).toBe("5705dfbfdcc595180ec387f3844666e1c88da2364a03b7e1b9aab0ec281083fb");
    expect(decoded(derived.canonical)).toBe('[7,[{"qty":1,"sku":"a"}],"\u00e9"]');
    expect(canonicalValue({ b: "1", a: 1, c: [{ y: null, x: -0 }] }, "/f")).toBe(
      '{"a":1,"b":"1","c":[{"x":0,"y":null}]}',
    );
  });
});

describe("the request fingerprint (key.ts fingerprint)", () => {
  it("is the same hash as before", async () => {
    const body = canonicalBody(text('{"b":1,"a":2}'), "application/json", []);
    expect(await fingerprint("POST", "/orders", "?x=1", '[["ip","203.0.113.9"]]', body)).toBe(
      "8148ac6092306b67c2662373d745c351",
    );
    expect(await fingerprint("PUT", "/o", "", "", new Uint8Array())).toBe("130635061b8f286052a1c4170bc057b7");
  });
});

describe("the identity hashes key names are made of", () => {
  it("hashIdentifier", async () => {
    expect(await hashIdentifier("")).toBe("e3b0c44298fc1c149afbf4c8996fb924");
    expect(await hashIdentifier("203.0.113.9")).toBe("d861b7e91033ebc1c1e8e7af39290101");
    expect(await hashIdentifier("é😀\u0000")).toBe("8cf55c5c4856286bfebeedef3662d2f6");
  });

  it("a bucket's hash: per region, or the world's for a global limit", async () => {
    const id = '[["ip","203.0.113.9"]]';
    expect(await bucketHash({ scope: "region" }, id, "us")).toBe("85a1757ebca235c7740b0f8b825d69c8");
    expect(await bucketHash({ scope: "split" }, id, "eu")).toBe("d003d4944a1fba6e193997e3e141938a");
    expect(await bucketHash({ scope: "global" }, id, "us")).toBe("9842976457be3223061354fd2b56066a");
  });

  it("a queued job's client", async () => {
    expect(await clientOf(limitOf("header:x-api-key"), facts({ "x-api-key": "k" }))).toBe(
      "4905c056d9c2b97e7f3c1be620fcec75",
    );
    expect(await clientOf(limitOf("global"), facts())).toBe("9842976457be3223061354fd2b56066a");
    expect(await clientOf(limitOf("header:x-api-key"), facts())).toBe("a8631184da94273f170ce078a83dd751");
  });

  it("the principals: auto (sub, credential, IP) and configured parts", async () => {
    expect(await autoPrincipal(facts({}, { sub: "alice" }))).toBe('[["jwt:sub","alice"]]');
    expect(await autoPrincipal(facts({ authorization: "Bearer sk_live_1" }))).toBe(
      '[["authorization:sha256","a6825aeb099b44fae537005f964d6d80"]]',
    );
    expect(await autoPrincipal(facts())).toBe('[["ip","203.0.113.9"]]');
    expect(await principalOf(["ip"], facts())).toBe('[["ip","203.0.113.9"]]');
    expect(await principalOf(["header:x-user", "path"], facts({ "x-user": "u1" }))).toBe(
      '[["header:x-user","u1"],["path","/orders"]]',
    );
  });

  it("an idempotency record's name, its replay buckets and the ids it shows", async () => {
    const principal = '[["jwt:sub","alice"]]';
    const ref = await recordRef(
      store,
      "pin",
      "orders",
      principal,
      "order-42",
      { trace: "00-x-y-00", idKey: ID_KEY, session: "s-1" },
      '[["ip","203.0.113.9"]]',
    );
    expect(ref.keyHash).toBe("9bbc63ebd0c6b8407e389b02bf46d96b");
    expect(ref.replaysKey).toBe("pin:idem:orders:replays:db235fb989c547a837e86df04e0a23dd");
    expect(ref.clientReplaysKey).toBe("pin:idem:orders:replays:9842976457be3223061354fd2b56066a");
    expect(ref.principal).toBe("108fab0b5de1c52838d560d94f26d1e0");
    expect(ref.trail?.session).toBe("32b34ba80d6a737a4494507af4b309b7");
  });

  it("a session lock's name and ledger id", async () => {
    const ref = await sessionRef(
      store,
      "pin",
      "chat",
      '[["jwt:sub","alice"]]',
      '[["header:sluice-session","s-1"]]',
      ID_KEY,
    );
    expect(ref.hash).toBe("06d114c88e8b71e5a91ebb959572dcf8");
    expect(ref.ledgerId).toBe("9c57dd3c8c195aad5eaa94dad77a2cca");
  });

  it("a pseudonym, keyed and unkeyed", async () => {
    const hash = await hashIdentifier("203.0.113.9");
    expect(await pseudonym(ID_KEY, hash)).toBe("8cbae21584b14700682ad93a7e8e66e7");
    expect(await pseudonym(undefined, hash)).toBe(hash);
  });

  it("a bucket's hash made as the benchmark makes it", async () => {
    expect(await hashIdentifier('[["ip","203.0.113.9"]]@us')).toBe("85a1757ebca235c7740b0f8b825d69c8");
  });
});

describe("the other digests: a script's SHA-1, the dashboard's session signature and actor", () => {
  it("names a script by the SHA-1 of its text (what EVALSHA sends)", async () => {
    expect(await new Script("return 1").sha()).toBe("e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
  });

  it("signs a session with HMAC-SHA-256 of the admin token, in hex", async () => {
    const id = "0123456789abcdef0123456789abcdef";
    const mac = "4cb89a42ec376c7fa8fb184bc817b2bc764df6bd07864227c3b257d8adea8f39";
    expect(await sessionOf(`9999999999999.${id}.${mac}`, "tok", 0)).toEqual({ id, expiry: 9999999999999 });
  });

  it("names a dashboard actor by 12 hex digits of the SHA-256 of its cookie", async () => {
    const app = new Hono<AdminEnv>().get("/", async (c) => c.text(await adminActor(c)));
    const res = await app.request("/", {
      headers: { cookie: "sluice_admin=9999999999999.0123456789abcdef0123456789abcdef.x" },
    });
    expect(await res.text()).toBe("session:79ed3dc7c015");
  });
});
