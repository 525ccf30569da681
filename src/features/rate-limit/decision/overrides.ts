import { overrideField, overridesKeyOfBucket, routeKeyPrefixOf } from "../../../store/layout.js";
import type { Store } from "../../../store/redis.js";
import { StoreVersions } from "../../../store/versions.js";
import { countOverrides, readOverrides } from "./overrides-store.js";

/**
 * Runtime overrides (`PUT /__sluice/overrides`) as this isolate knows them, so that decide.lua
 * does not read the route's override hash on every decision (Upstash bills that HMGET each time).
 *
 * Each isolate keeps a copy of the hash of each route it decides (`{prefix}:{route}:overrides`,
 * per Redis), labelled with the Redis's change counter (`{prefix}:version`, src/store/versions.ts)
 * it was read at. Every writer of the hash bumps the counter after its write, and every decision
 * returns it, so a copy is refetched (one HGETALL, off the request path: the caller's `defer`,
 * i.e. `ctx.waitUntil`) only when the counter moved: nothing at all while nothing changes. The
 * decision sends the copy's values with the version they were read at; decide.lua reads the
 * counter in its MGET and, when it has moved, reads the two fields it needs itself (one HMGET),
 * so an override applies on every isolate's next decision. When there is no copy worth sending
 * (the isolate's first decision of the route, a copy still behind `TRUSTED_MS` after the move,
 * a Redis that did not answer the refetch) or the hash holds more than `MAX_OVERRIDES` fields,
 * the script reads the hash likewise. Nothing on the request path waits for a refetch. Expiry is
 * left to the script, against Redis's clock: the copy keeps expired values.
 */

/** How long after the counter moved a copy behind it is still sent (its refetch is on the way, the script checks); past that, "read". */
export const TRUSTED_MS = 1_000;
/** A refetch that failed is tried again no sooner than this. */
export const REFRESH_AFTER_MS = 800;
/** A hash with more fields than this is not copied (memory, transfer): its route's decisions read it in the script. */
export const MAX_OVERRIDES = 1_000;
/** Copies kept per isolate (one per route and Redis in use); the oldest goes first. */
export const MAX_COPIES = 1_000;

/**
 * What decide.lua is told about a bucket's overrides: the values of its two fields in the hash
 * (`rate:burst:period_ms:until_ms`, absent for none) and the version of the Redis's change counter
 * they were read at (the script reads the hash itself when the counter has moved since), or
 * `"read"`: read them yourself.
 */
export type OverrideInput = { everybody?: string; own?: string; version?: number } | "read";

/** What locates a bucket's overrides: its key (`{prefix}:{route}:{limit}:{hash}`) and its Redis. */
export interface OverrideAddress {
  key: string;
  store: Store;
}

interface Copy {
  readonly store: Store;
  readonly key: string;
  /** `{prefix}:{route}:`, what `changed` is told. */
  readonly routePrefix: string;
  /** The Redis's change counter when the HGETALL was sent: every override written before it moved there is in the copy. */
  version?: number;
  /** When a refresh last started, whatever came of it: a failing Redis is asked at most once per REFRESH_AFTER_MS. */
  tried: number;
  /** field → value; "too many" past MAX_OVERRIDES; undefined before the first load. */
  fields?: Map<string, string> | "too many";
  loading?: Promise<void>;
}

/** The override hash of a bucket's route: `{prefix}:{route}:overrides` from `{prefix}:{route}:{limit}:{hash}`. */
export const overridesKeyOf = overridesKeyOfBucket;

/**
 * The isolate's copies of the override hashes, one per route and Redis in use, at most `capacity`
 * (the oldest goes first). Kept by whoever keeps the isolate's other state, and handed to each
 * decision.
 *
 * @example
 * const overrides = new OverrideCopies();
 * overrides.refresh(buckets, Date.now(), defer, (routePrefix) => blocked.forgetRoute(routePrefix));
 * const input = overrides.input(bucket, Date.now()); // "read" until a copy is in
 */
export class OverrideCopies {
  /** In insertion order: past `capacity`, the first goes. */
  private readonly copies = new Map<string, Copy>();

  constructor(
    private readonly capacity = MAX_COPIES,
    private readonly versions = new StoreVersions(),
  ) {}

  /**
   * Starts, in the background, a refresh of each copy these buckets need that is behind its
   * Redis's change counter (or missing, once a decision has reported the counter). Never waits. `changed(routePrefix)` is called when a refresh finds a route's overrides changed
   * since the copy before, with `{prefix}:{route}:`, so that refusals decided on the old figures
   * can be forgotten.
   */
  refresh(
    buckets: ReadonlyArray<OverrideAddress>,
    now: number,
    defer: (work: Promise<unknown>) => void,
    changed: (routePrefix: string) => void,
  ): void {
    for (const b of buckets) {
      const version = this.versions.of(b.store.id);
      // before the first decision on this Redis the counter is unknown: that decision reads the
      // hash in the script, and its reply brings the counter to label the copy with
      if (version === undefined) continue;
      const c = this.copyOf(b);
      // a counter that reads 0 was never bumped (it outlives what it counts): the hash is empty, nothing to fetch
      if (version === 0 && c.fields === undefined) {
        Object.assign(c, { fields: new Map<string, string>(), version: 0 });
        continue;
      }
      if (c.loading || (c.fields !== undefined && c.version === version) || now - c.tried < REFRESH_AFTER_MS) continue;
      c.tried = now;
      c.loading = reload(c, version, changed).finally(() => (c.loading = undefined));
      defer(c.loading);
    }
  }

  /** A decision's reply from this Redis said its change counter is `version` (the copies behind it are refetched by `refresh`). */
  observe(store: Store, version: number, now = Date.now()): void {
    this.versions.observe(store.id, version, now);
  }

  /**
   * What the script gets for this bucket at `now`: the values from a trusted copy, else "read". With
   * no copy yet and no counter seen other than 0, it is an empty copy at version 0: the script reads
   * the hash only if the counter it finds is not 0 (a Redis where nothing was ever written costs
   * a fresh isolate nothing).
   */
  input(b: OverrideAddress, now: number): OverrideInput {
    const c = this.copies.get(copyId(b.store, overridesKeyOf(b.key)));
    if (c?.fields === undefined && !this.versions.of(b.store.id)) return { version: 0 };
    if (!c || !(c.fields instanceof Map) || c.version === undefined || !this.current(c, now)) return "read";
    const name = b.key.slice(routeKeyPrefixOf(b.key).length);
    const limit = name.slice(0, name.indexOf(":"));
    return { everybody: c.fields.get(overrideField(limit)), own: c.fields.get(name), version: c.version };
  }

  /**
   * Puts a value this isolate wrote itself (the adaptive limit, src/features/rate-limit/adaptive/) into its copy of
   * the bucket's override hash, so that its next decisions use it before the next refresh; the
   * refresh then brings what every writer wrote. A copy it does not hold is left to the refresh.
   */
  patch(b: OverrideAddress, field: string, value: string): void {
    const c = this.copies.get(copyId(b.store, overridesKeyOf(b.key)));
    if (c?.fields instanceof Map) c.fields.set(field, value);
  }

  /**
   * Whether a copy is worth sending at `now`: at the counter last seen, or behind it for less than
   * `TRUSTED_MS` (its refetch is on the way; the script checks the counter and reads the hash
   * itself meanwhile). Past that, "read" says so without the check.
   */
  private current(c: Copy, now: number): boolean {
    const latest = this.versions.of(c.store.id);
    if (latest === undefined) return false;
    return c.version === latest || now - this.versions.changedAt(c.store.id) <= TRUSTED_MS;
  }

  /** Copies kept (for tests and metrics). */
  get size(): number {
    return this.copies.size;
  }

  private copyOf(b: OverrideAddress): Copy {
    const routePrefix = routeKeyPrefixOf(b.key);
    const key = overridesKeyOfBucket(b.key);
    const id = copyId(b.store, key);
    let c = this.copies.get(id);
    if (!c) {
      c = { store: b.store, key, routePrefix, tried: 0 };
      this.copies.set(id, c);
      if (this.copies.size > this.capacity) this.copies.delete(this.copies.keys().next().value as string);
    }
    return c;
  }
}

const copyId = (store: Store, key: string) => `${store.id}\u0000${key}`;

/** `version` is the Redis's change counter when the refresh started: the copy is labelled with it. */
async function reload(c: Copy, version: number, changed: (routePrefix: string) => void): Promise<void> {
  try {
    // past the cap only the size is asked (HLEN), until the hash is back under it
    if (c.fields === "too many" && (await countOverrides(c.store, c.key)) > MAX_OVERRIDES) {
      c.version = version;
      return;
    }
    const hash = Object.entries(await readOverrides(c.store, c.key));
    const next = hash.length > MAX_OVERRIDES ? "too many" : new Map(hash);
    const before = c.fields;
    c.fields = next;
    c.version = version;
    if (before !== undefined && !same(before, next)) changed(c.routePrefix);
  } catch {
    // keep the copy and its label: TRUSTED_MS after the counter moved the script reads the hash itself
  }
}

function same(a: Map<string, string> | "too many", b: Map<string, string> | "too many"): boolean {
  if (a === "too many" || b === "too many") return a === b;
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  return true;
}
