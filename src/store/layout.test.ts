import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { asKeyHash, hashIdentifier, type KeyHash } from "../identity/hash.js";
import {
  LAYOUT,
  adaptiveStateKey,
  adminAuthKey,
  auditKey,
  adminSessionKey,
  banLevelKey,
  banRefusalsKey,
  breakerKey,
  bucketKey,
  idempotencyFenceKey,
  idempotencyIndeterminateKey,
  idempotencyRecordKey,
  idempotencyReplaysKey,
  jobKey,
  jobLeaseKey,
  ledgerKey,
  listsKey,
  metricsKeys,
  overrideField,
  overridesKey,
  overridesKeyOfBucket,
  queueClientKey,
  queueDepthKey,
  rebalanceLockKey,
  routeKeyPrefix,
  routeKeyPrefixOf,
  sessionFenceKey,
  sessionLockKey,
  shareKeys,
  shareRecordKey,
  versionKeyOfBucket,
  type LayoutKind,
  type LayoutStore,
} from "./layout.js";

const prefix = "sluice";
const route = "checkout";
const limit = "per-ip";
const region = "eu";
const minute = 29_000_000;

/** Fixed hashes, each of a different value, so a key shows which one it was given. */
const h = {
  bucket: asKeyHash("0123456789abcdef0123456789abcdef"),
  id: asKeyHash("11111111111111111111111111111111"),
  ip: asKeyHash("22222222222222222222222222222222"),
  principalKey: asKeyHash("33333333333333333333333333333333"),
  principal: asKeyHash("44444444444444444444444444444444"),
  lock: asKeyHash("55555555555555555555555555555555"),
  entry: asKeyHash("77777777777777777777777777777777"),
  session: asKeyHash("88888888888888888888888888888888"),
  route: asKeyHash("99999999999999999999999999999999"),
  client: asKeyHash("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
};

/** Each kind's key(s) for the sample input, from its layout.ts function. */
const built: Record<LayoutKind, string[]> = {
  bucket: [bucketKey(prefix, route, limit, h.bucket)],
  share: [shareKeys(prefix, route, limit, region).shareKey],
  demand: [shareKeys(prefix, route, limit, region).demandKey],
  shareRecord: [shareRecordKey(prefix, route, limit)],
  rebalanceLock: [rebalanceLockKey(prefix)],
  job: [jobKey(prefix, h.id)],
  jobLease: [jobLeaseKey(prefix, h.id)],
  queueDepth: [queueDepthKey(prefix, h.route)],
  queueClient: [queueClientKey(prefix, h.route, h.client)],
  breaker: [breakerKey(prefix, route)],
  overrides: [overridesKey(prefix, route)],
  version: [versionKeyOfBucket(bucketKey(prefix, route, limit, h.bucket))],
  adaptive: [adaptiveStateKey(prefix, route, h.bucket)],
  lists: [listsKey(prefix)],
  banRefusals: [banRefusalsKey(prefix, route, limit, h.entry)],
  banLevel: [banLevelKey(prefix, route, limit, h.entry)],
  adminAuth: [adminAuthKey(prefix, h.ip)],
  adminSession: [adminSessionKey(prefix, h.session)],
  metricsMinute: [metricsKeys(prefix, minute).minute, metricsKeys(prefix, minute).blocked],
  metricsLabels: [metricsKeys(prefix, minute).labels],
  metricsTotal: [metricsKeys(prefix, minute).total],
  idempotencyRecord: [idempotencyRecordKey(prefix, route, h.principalKey)],
  idempotencyFence: [idempotencyFenceKey(prefix, route)],
  idempotencyReplays: [idempotencyReplaysKey(prefix, route, h.principal)],
  idempotencyIndeterminate: [idempotencyIndeterminateKey(prefix, route)],
  sessionLock: [sessionLockKey(prefix, h.lock)],
  sessionFence: [sessionFenceKey(prefix)],
  ledger: [ledgerKey(prefix)],
  audit: [auditKey(prefix)],
};

/** The documented placeholders, and what the sample input puts in them. */
const placeholders: Record<string, string> = {
  "{key_prefix}": prefix,
  "{route}": route,
  "{limit}": limit,
  "{region}": region,
  "{minute}": String(minute),
  "{hash}": h.bucket,
  "{sha256(id)}": h.id,
  "{sha256(ip)}": h.ip,
  "{sha256(principal, key)}": h.principalKey,
  "{sha256(principal)}": h.principal,
  "{sha256([principal, identity])}": h.lock,
  "{sha256(entry)}": h.entry,
  "{sha256(session)}": h.session,
  "{sha256(route)}": h.route,
  "{sha256(client)}": h.client,
};

function fill(pattern: string): string {
  return pattern.replace(/\{[^{}]*\}/g, (p) => {
    const v = placeholders[p];
    if (v === undefined) throw new Error(`no sample value for ${p} in ${pattern}`);
    return v;
  });
}

describe("Redis layout: every key as documented", () => {
  it("builds each kind's key exactly as its documented pattern reads", () => {
    for (const kind of Object.keys(LAYOUT) as LayoutKind[]) {
      expect(built[kind], kind).toEqual(LAYOUT[kind].patterns.map(fill));
    }
  });

  it("keeps the exact names existing deployments hold data under", () => {
    // written out in full, so that a change to a pattern and its function together still fails here
    expect(built).toEqual({
      bucket: ["sluice:checkout:per-ip:0123456789abcdef0123456789abcdef"],
      share: ["sluice:checkout:per-ip:share:eu"],
      demand: ["sluice:checkout:per-ip:demand:eu"],
      shareRecord: ["sluice:checkout:per-ip:shares"],
      rebalanceLock: ["sluice:rebalance:lock"],
      job: ["sluice:job:11111111111111111111111111111111"],
      jobLease: ["sluice:job:11111111111111111111111111111111:lease"],
      queueDepth: ["sluice:queue:99999999999999999999999999999999"],
      queueClient: ["sluice:queue:99999999999999999999999999999999:client:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"],
      breaker: ["sluice:checkout:breaker"],
      overrides: ["sluice:checkout:overrides"],
      version: ["sluice:version"],
      adaptive: ["sluice:checkout:adaptive:state:0123456789abcdef0123456789abcdef"],
      lists: ["sluice:lists"],
      banRefusals: ["sluice:checkout:per-ip:refusals:77777777777777777777777777777777"],
      banLevel: ["sluice:checkout:per-ip:ban:77777777777777777777777777777777"],
      adminAuth: ["sluice:admin-auth:22222222222222222222222222222222"],
      adminSession: ["sluice:admin-session:88888888888888888888888888888888"],
      metricsMinute: ["sluice:metrics:m:29000000", "sluice:metrics:blocked:29000000"],
      metricsLabels: ["sluice:metrics:labels:29000000"],
      metricsTotal: ["sluice:metrics:total"],
      idempotencyRecord: ["sluice:idem:checkout:33333333333333333333333333333333"],
      idempotencyFence: ["sluice:idem:checkout:fence"],
      idempotencyReplays: ["sluice:idem:checkout:replays:44444444444444444444444444444444"],
      idempotencyIndeterminate: ["sluice:idem:checkout:indeterminate"],
      sessionLock: ["sluice:session:55555555555555555555555555555555"],
      sessionFence: ["sluice:session:fence"],
      ledger: ["sluice:ledger"],
      audit: ["sluice:audit"],
    });
    expect(idempotencyReplaysKey(prefix, route, "-")).toBe("sluice:idem:checkout:replays:-");
  });

  it("derives a route's keys from one of its bucket keys, and names override fields", () => {
    const bucket = bucketKey(prefix, route, limit, h.bucket);
    expect(routeKeyPrefixOf(bucket)).toBe(routeKeyPrefix(prefix, route));
    expect(routeKeyPrefix(prefix, route)).toBe("sluice:checkout:");
    expect(overridesKeyOfBucket(bucket)).toBe(overridesKey(prefix, route));
    expect(overrideField(limit, h.bucket)).toBe(bucket.slice(routeKeyPrefix(prefix, route).length));
    expect(overrideField(limit)).toBe("per-ip:*");
    for (const key of Object.values(built).flat()) expect(key.startsWith(`${prefix}:`), key).toBe(true);
  });
});

/** The manual's "Redis layout" page (docs/redis-layout.md): each table row's keys, where they live, what they hold, their TTL. */
function readmeLayout(): {
  rows: Array<{ patterns: string[]; store: LayoutStore; holds: string; ttl: string }>;
  bucket: string[];
} {
  const readme = `\n${readFileSync(new URL("../../docs/redis-layout.md", import.meta.url), "utf8")}`;
  const start = readme.indexOf("\n# Redis layout\n");
  expect(start, "docs/redis-layout.md opens with its title").toBeGreaterThanOrEqual(0);
  const end = readme.indexOf("\n# ", start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  const rows = section
    .split("\n")
    .filter((line) => line.startsWith("|") && /`(\{key_prefix\}|…)/.test(line))
    .map((line) => {
      const [keyCell = "", holds = "", ttl = "", ...rest] = line
        .slice(1, -1)
        .split(" | ")
        .map((c) => c.trim());
      expect(rest, line).toEqual([]);
      const patterns = [...keyCell.matchAll(/`([^`]+)`/g)].map((m) => (m[1] as string).replace(/^…/, "{key_prefix}"));
      const where = /\((home|region|every region)\)$/.exec(keyCell)?.[1] as LayoutStore | undefined;
      // the split-limit table says its keys live "in each region's Redis unless noted"
      return { patterns, store: where ?? "region", holds, ttl };
    });
  // the bucket is described in the prose above the tables
  const bucketLine = section.split("\n").find((line) => line.startsWith("One key per bucket:")) ?? "";
  const bucket = [...bucketLine.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);
  return { rows, bucket };
}

describe("Redis layout: LAYOUT and docs/redis-layout.md agree", () => {
  const { rows, bucket } = readmeLayout();

  it("documents the bucket key in the section's opening sentence", () => {
    expect(bucket).toContain(LAYOUT.bucket.patterns[0]);
  });

  it("has a docs/redis-layout.md row for every LAYOUT kind, cell for cell", () => {
    // every disagreement at once, each as the row docs/redis-layout.md should have
    const disagreements: string[] = [];
    for (const [kind, entry] of Object.entries(LAYOUT)) {
      if (kind === "bucket") continue;
      const row = rows.find((r) => JSON.stringify(r.patterns) === JSON.stringify(entry.patterns));
      if (row && row.store === entry.store && row.holds === entry.holds && row.ttl === entry.ttl) continue;
      const keys = entry.patterns.map((p) => `\`${p}\``).join(", ");
      disagreements.push(
        `${row ? "differs" : "missing"}: | ${keys} (${entry.store}) | ${entry.holds} | ${entry.ttl} |`,
      );
    }
    expect(disagreements).toEqual([]);
  });

  it("has a LAYOUT kind for every docs/redis-layout.md row", () => {
    const known = Object.values(LAYOUT).map((e) => JSON.stringify(e.patterns));
    const unknown = rows.filter((r) => !known.includes(JSON.stringify(r.patterns))).map((r) => r.patterns.join(", "));
    expect(unknown).toEqual([]);
    expect(rows.length).toBeGreaterThan(0);
  });
});

describe("Redis layout: client input reaches a key only hashed", () => {
  const hostile = "203.0.113.9:evil\r\n*{x}`sluice:lists`";

  it("puts nothing of a client value in any key but its hash", async () => {
    const hash = await hashIdentifier(hostile);
    const keys = [
      bucketKey(prefix, route, limit, hash),
      adaptiveStateKey(prefix, route, hash),
      jobKey(prefix, hash),
      jobLeaseKey(prefix, hash),
      queueDepthKey(prefix, hash),
      adminAuthKey(prefix, hash),
      queueClientKey(prefix, h.route, hash),
      adminSessionKey(prefix, hash),
      banRefusalsKey(prefix, route, limit, hash),
      banLevelKey(prefix, route, limit, hash),
      idempotencyRecordKey(prefix, route, hash),
      idempotencyReplaysKey(prefix, route, hash),
      sessionLockKey(prefix, hash),
    ];
    for (const key of keys) {
      expect(key, key).not.toContain("203.0.113.9");
      // configured names and the hash: letters, digits, '_', '.', '-', and colons between them
      expect(key, key).toMatch(/^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)+$/);
      expect(key.split(hash).length - 1, key).toBe(1);
    }
  });

  it("builds each hashed kind from the hash alone: the key is its pattern with the hash in the hashed slot", () => {
    const hashedKinds = (Object.keys(LAYOUT) as LayoutKind[]).filter((k) =>
      LAYOUT[k].patterns.some((p) => /\{(hash|sha256\()/.test(p)),
    );
    expect(hashedKinds.sort()).toEqual(
      [
        "adaptive",
        "adminAuth",
        "adminSession",
        "banLevel",
        "banRefusals",
        "bucket",
        "idempotencyRecord",
        "idempotencyReplays",
        "job",
        "jobLease",
        "queueDepth",
        "queueClient",
        "sessionLock",
      ].sort(),
    );
    for (const kind of hashedKinds) {
      const [key] = built[kind];
      const used = Object.values(h).filter((x) => key?.includes(x));
      // a client's share of a queue is keyed under its route's hash: two hashes, each in its slot
      expect(used, kind).toHaveLength(kind === "queueClient" ? 2 : 1);
    }
  });

  it("refuses, at compile time, a plain string where a hash belongs", () => {
    const raw: string = hostile;
    const refused = [
      // @ts-expect-error a client value is not a KeyHash
      () => bucketKey(prefix, route, limit, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => adaptiveStateKey(prefix, route, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => jobKey(prefix, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => jobLeaseKey(prefix, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => queueDepthKey(prefix, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => adminAuthKey(prefix, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => adminSessionKey(prefix, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => banRefusalsKey(prefix, route, limit, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => banLevelKey(prefix, route, limit, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => idempotencyRecordKey(prefix, route, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => idempotencyReplaysKey(prefix, route, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => sessionLockKey(prefix, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => overrideField(limit, raw),
      // @ts-expect-error a client value is not a KeyHash
      () => queueClientKey(prefix, h.route, raw),
    ];
    expect(refused).toHaveLength(14);
  });

  it("accepts text as a hash only when it is one (32 hex digits)", () => {
    const ok: KeyHash = asKeyHash("0123456789abcdef0123456789abcdef");
    expect(ok).toBe("0123456789abcdef0123456789abcdef");
    for (const bad of [
      "",
      hostile,
      "0123456789ABCDEF0123456789ABCDEF",
      "0123456789abcdef0123456789abcde",
      "0123456789abcdef0123456789abcdef0",
      "-",
      "0123456789abcdef:123456789abcdef",
    ]) {
      expect(() => asKeyHash(bad), bad).toThrow(TypeError);
    }
  });
});
