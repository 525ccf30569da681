import type { RequestFacts } from "../../identity/identify.js";
import type { Defer } from "../../util/defer.js";
import type { Store } from "../../store/redis.js";
import { StoreVersions } from "../../store/versions.js";
import type { Runtime } from "../../runtime.js";
import { ListsInForce } from "./lists-in-force.js";
import { listField, readEntriesAt, type ListEntry } from "./lists-store.js";
import { compileEntry, EntryIndex } from "./list-index.js";
import { modeInForce, type RouteMode } from "./mode/store.js";

export type { ListEntry } from "./lists-store.js";

/**
 * The isolate's copy of the lists, made by the first middleware that applies or manages them, so
 * that a Worker that applies none (`rateLimit()` alone) carries none of their code. A ban puts its
 * entry in force in it at once (`ListsInForce`), and there is nothing to do when there is none.
 *
 * @param versions the change counters the copy follows: the runtime's (a test's lagging isolate gives others)
 */
export function listsOf(runtime: Pick<Runtime, "own" | "versions">, versions = runtime.versions): ListCache {
  return runtime.own(ListCache, () => (runtime.own(ListsInForce).copy = new ListCache(versions)));
}

/** A read that failed is tried again no sooner than this. */
const RETRY_MS = 800;
/**
 * An isolate whose last request reported no change counter (it did not decide: an unmatched path,
 * a route without limits, a denied client), and that has heard none for this long either, reads
 * the lists again once they are this old, as it always did. Requests that decide keep them current
 * through the counter their decisions report (a lease renewal reports one too).
 */
export const LISTS_FALLBACK_MS = 5_000;
/** Whatever the decisions report, the lists are read again at least this often. */
export const LISTS_MAX_AGE_MS = 300_000;

interface Held {
  prefix: string;
  /** When the last read started (isolate clock). */
  at: number;
  /** The entries in force when read (access-lists.lua prunes the rest), indexed by what names a client. */
  index: EntryIndex;
  /** The routes' degrade switches read with the entries (src/features/access/mode/). */
  modes: RouteMode[];
  /** The home Redis's change counter the entries were read at, and that Redis. */
  version?: number;
  storeId?: string;
  /** A counter moved since the last read started: read again. */
  behind: boolean;
  /** The last read failed: the next is not tried before `RETRY_MS`. */
  failed?: boolean;
  /** The read in flight: one at a time, so an older read never lands over a newer one. */
  loading?: Promise<void>;
  /** The copy's first read: every request waits for it, not only the one that started it. */
  first: Promise<void>;
}

/** Where the lists are read from: the home region's store, under the deployment's key prefix. */
export interface ListSource {
  prefix: string;
  store: Store | undefined;
}

/**
 * The deny and allow lists as this isolate last read them, read again in the background only when
 * a change counter (`{prefix}:version`, which every writer of the lists bumps and every decision
 * returns) moved, so the lists cost no Redis call while nothing changes, and none on the request
 * path but the isolate's first (which waits for the first read). An isolate whose requests do not
 * decide reads them again once they are `LISTS_FALLBACK_MS` old, and every isolate after `LISTS_MAX_AGE_MS`.
 */
export class ListCache {
  private cache: Held | undefined;
  /** When the previous request's verdict was asked for; 0: never. */
  private lastCheck = 0;

  constructor(private readonly versions = new StoreVersions()) {
    versions.onChange(() => {
      if (this.cache) this.cache.behind = true;
    });
  }

  /**
   * What the lists say about a request: `deny`, `allow` (skip this route's limits) or nothing.
   * `claimed`: the claims of a bearer token that did not verify, which deny entries still match
   * (a client can only refuse itself by forging them) and allow entries never do.
   */
  async verdict(
    source: ListSource,
    facts: RequestFacts,
    route: string | undefined,
    defer: Defer,
    claimed?: Record<string, unknown>,
  ): Promise<"deny" | "allow" | undefined> {
    const index = await this.index(source, defer);
    // once per request (namesClaims may have asked before): a decision after it reports a counter
    this.lastCheck = Date.now();
    return verdictOf(index, facts, route, claimed);
  }

  /** Whether an entry in force names a JWT claim (`jwt:sub=…`): then the request's token must be read first. */
  async namesClaims(source: ListSource, defer: Defer): Promise<boolean> {
    const now = Date.now();
    return (await this.index(source, defer)).claimEntries.some((e) => e.until > now);
  }

  /**
   * The degrade switch in force for `route` (src/features/access/mode/), from the copy the lists are read
   * into: no Redis call of its own. The request's `verdict` has already decided whether that copy
   * is due a refresh (asking again here would take this request for the next one); only a copy
   * never read is read first.
   */
  async modeOf(source: ListSource, route: string, defer: Defer): Promise<RouteMode | undefined> {
    const c = this.cache;
    const modes = c && c.prefix === source.prefix ? c.modes : (await this.held(source, defer)).modes;
    return modeInForce(modes, route, Date.now());
  }

  /**
   * An entry this isolate has just written to Redis, in force here at once rather than after the
   * next refresh (which reads it back from Redis). Nothing to do before the lists were first read:
   * that first read finds it.
   */
  add(prefix: string, entry: ListEntry): void {
    const c = this.cache;
    if (!c || c.prefix !== prefix) return;
    const field = listField(entry);
    const now = Date.now();
    const kept = c.index.entries.filter((e) => listField(e) !== field && e.until > now);
    c.index = new EntryIndex([...kept, compileEntry(entry)]);
  }

  /**
   * Reads the lists (and the degrade switches) again now, after this isolate wrote them (the admin
   * API): the writer's own copy holds its write from its next request on, instead of once one of its
   * decisions has reported the change counter the write moved. Waits for a read in flight first, so
   * that read, started before the write, cannot land over this one. Nothing to do before the lists
   * were first read: that first read finds the write.
   */
  async reread(source: ListSource): Promise<void> {
    const c = this.cache;
    if (!c || c.prefix !== source.prefix) return;
    while (c.loading) await c.loading;
    await this.load(c, source);
  }

  private async index(source: ListSource, defer: Defer): Promise<EntryIndex> {
    return (await this.held(source, defer)).index;
  }

  /** The copy held, read first if there is none yet, and read again in the background when due. */
  private async held(source: ListSource, defer: Defer): Promise<Held> {
    let c = this.cache;
    if (!c || c.prefix !== source.prefix) {
      const held: Held = {
        prefix: source.prefix,
        at: 0,
        index: new EntryIndex([]),
        modes: [],
        behind: false,
        first: Promise.resolve(),
      };
      this.cache = c = held;
      held.first = this.load(held, source);
    }
    await c.first;
    if (!c.loading && this.due(c, Date.now(), this.lastCheck)) defer(this.load(c, source));
    return c;
  }

  /** One read of the lists into `c`, marked as the read in flight until it lands. */
  private load(c: Held, source: ListSource): Promise<void> {
    const loading = refresh(c, source).finally(() => {
      if (c.loading === loading) c.loading = undefined;
    });
    c.loading = loading;
    return loading;
  }

  /** Whether the lists held should be read again at `now`; `lastCheck`: when the previous request asked. */
  private due(c: Held, now: number, lastCheck: number): boolean {
    if (now - c.at > LISTS_MAX_AGE_MS) return true;
    // the previous request reported no counter after asking, nor anything else for a while (a lease
    // renewal reports one): this isolate may not be deciding at all
    const observed = this.versions.lastObservedAt;
    const undecided = observed < lastCheck && now - observed > LISTS_FALLBACK_MS;
    if (undecided && now - c.at > LISTS_FALLBACK_MS) return true;
    // a decision reporting a later counter than the read's (a change the first sight of the counter
    // could not flag as one); one reporting an earlier one is only a decision older than the read
    const home = c.storeId === undefined ? undefined : this.versions.of(c.storeId);
    const moved = c.behind || (home !== undefined && c.version !== undefined && home > c.version);
    return moved && (!c.failed || now - c.at >= RETRY_MS);
  }
}

function verdictOf(
  index: EntryIndex,
  facts: RequestFacts,
  route: string | undefined,
  claimed?: Record<string, unknown>,
): "deny" | "allow" | undefined {
  if (index.entries.length === 0) return undefined;
  const now = Date.now();
  const denyFacts = claimed && !facts.claims ? { ...facts, claims: claimed } : facts;
  if (index.matching(denyFacts).some((e) => e.kind === "deny" && e.until > now)) return "deny";
  const allows = (e: ListEntry) => e.kind === "allow" && e.until > now && (!e.routes || e.routes.includes(route ?? ""));
  if (route && index.matching(facts).some(allows)) return "allow";
  return undefined;
}

async function refresh(c: Held, source: ListSource): Promise<void> {
  c.at = Date.now();
  const wasBehind = c.behind;
  c.behind = false;
  if (!source.store) return;
  try {
    const read = await readEntriesAt(source.store, source.prefix);
    c.index = new EntryIndex(read.entries.map(compileEntry));
    c.modes = read.modes;
    c.version = read.version;
    c.storeId = source.store.id;
    c.failed = false;
  } catch {
    // keep the last lists we had (a Redis hiccup must not lift a deny entry), and try again
    c.behind ||= wasBehind;
    c.failed = true;
  }
}
