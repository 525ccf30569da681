import type { Config, Limit } from "../../config/index.js";
import type { Scope } from "../../context.js";
import type { Env } from "../../env.js";
import type { Stores } from "../../region/index.js";
import type { Defer } from "../../util/defer.js";
import { hashIdentifier, type KeyHash } from "../../identity/hash.js";
import { readPart, trimHttpWhitespace, type RequestFacts } from "../../identity/identify.js";
import { banLevelKey, banRefusalsKey } from "../../store/layout.js";
import type { Store } from "../../store/redis.js";
import { validEntry } from "../../identity/entry.js";
import type { ListCache } from "./lists.js";
import { ListsInForce } from "./lists-in-force.js";
import { announce, decodeEntries, MAX_BANS, readEntryIn, writeEntry, type ListEntry } from "./lists-store.js";
import type { MetricsBuffer } from "../../metrics/index.js";
import { log, settleQuietly } from "../../util/log.js";
import { idKeyOf, pseudonym, type IdKey } from "../../identity/pseudonym.js";

/** A limit's `ban` table, durations in ms. */
export type BanSettings = NonNullable<Limit["ban"]>;

/** The longest entry a ban writes, as the admin API allows: a longer value is limited, never banned. */
const MAX_ENTRY_CHARS = 300;

/** A client's ban history lasts at least this long after its last ban. */
const HISTORY_FLOOR_MS = 86_400_000;

/**
 * How long ban number `level` lasts (1 is the first): that entry of `for`, and the last one for
 * every ban after them, so a client that keeps coming back never gets a shorter ban.
 *
 * @example banDuration([120_000, 600_000, 3_600_000], 2) // 600_000
 */
export function banDuration(durations: readonly number[], level: number): number {
  const index = Math.min(Math.max(level, 1), durations.length) - 1;
  return durations[index] ?? 0;
}

/**
 * How long a client's ban level is kept after its last ban: a day, or twice the longest ban when
 * that is longer, so a client banned again soon after its longest ban ran out still escalates.
 */
export function banHistoryMs(durations: readonly number[]): number {
  return Math.max(HISTORY_FLOOR_MS, 2 * Math.max(...durations));
}

/**
 * The deny-list entry that names the client a limit refused, as an operator would write it: its
 * IP, or `<key part>=<value>`. A request that did not carry the part was limited by its IP
 * (`missing = "ip"`), so its IP is what is banned. `undefined` when no entry would name exactly
 * this client: a value the lists would read back otherwise (surrounding whitespace, a line
 * break), one too long, or an address that is not an IP.
 *
 * @example banEntry({ key: ["header:x-api-key"], missing: "ip" }, facts) // "header:x-api-key=k1"
 */
export function banEntry(limit: Pick<Limit, "key">, facts: RequestFacts): string | undefined {
  const part = limit.key[0];
  const value = part === undefined || part === "ip" ? undefined : readPart(part, facts);
  const entry = value === undefined ? facts.ip : `${part}=${value}`;
  const readsBack = value === undefined || trimHttpWhitespace(value) === value;
  return readsBack && entry.length <= MAX_ENTRY_CHARS && validEntry(entry) ? entry : undefined;
}

/** One refusal on its way to a ban: who refused whom, and where the count is kept. */
interface BanCount {
  /**
   * The isolate's copy of the lists, if a middleware of this isolate applies them (the ban is in
   * force here at once), and its ban counts.
   */
  lists: Pick<ListCache, "add"> | undefined;
  metrics: Pick<MetricsBuffer, "countBan">;
  store: Store;
  /** What tells every other Redis of the deployment that the lists changed. */
  announce: () => Promise<void>;
  prefix: string;
  route: string;
  limit: string;
  settings: BanSettings;
  entry: string;
  hash: KeyHash;
  /** The deployment's key of the ids shown for clients: the log names the client by its keyed id. */
  idKey?: IdKey;
}

/** Where a refusal happened, as plain parts: the route, the client's facts and what a ban is written with. */
export interface RefusalSite {
  route?: string;
  facts: RequestFacts;
  stores: Stores;
  lists: Pick<ListCache, "add"> | undefined;
  metrics: Pick<MetricsBuffer, "countBan">;
  config: Config;
  env: Env;
  defer: Defer;
}

/** The parts of a request's scope a refusal's site is read from. */
type RefusalScope = Pick<Scope, "route" | "facts" | "stores" | "config" | "env" | "defer" | "runtime">;

/** The refusal's site, as the ban count takes it. */
export function refusalSite(scope: RefusalScope): RefusalSite {
  const { facts, stores, config, env, defer, runtime } = scope;
  return {
    route: scope.route?.name,
    facts,
    stores,
    config,
    env,
    defer,
    lists: runtime.own(ListsInForce).copy,
    metrics: runtime.metrics,
  };
}

/**
 * A refusal of a step that decides limits (the rate limiter's, the MCP adapter's), counted towards
 * a ban: handed to them where the steps are composed (src/pipeline/steps.ts,
 * src/middleware/rate-limit.ts), so the rate limiter knows nothing of the lists a ban is written to.
 */
export function banOnRefusal(scope: RefusalScope, limit: Limit): void {
  countRefusal(refusalSite(scope), limit);
}

/**
 * Counts a refusal towards the refused client's next ban, when the refusing limit has a `ban`:
 * off the request path, in the home region's Redis, best effort (a count that fails to land
 * never fails the request; the client is still limited).
 */
export function countRefusal(site: RefusalSite, limit: Limit): void {
  const settings = limit.ban;
  const route = site.route;
  if (!settings || route === undefined) return;
  const entry = banEntry(limit, site.facts);
  const store = site.stores.offPath();
  if (entry === undefined || !store) return;
  const { config, lists, metrics } = site;
  const announced = () => announce(config, site.stores, store);
  const counted = hashIdentifier(entry).then((hash) =>
    refused({
      lists,
      metrics,
      store,
      announce: announced,
      prefix: config.key_prefix,
      route,
      limit: limit.name,
      settings,
      entry,
      hash,
      idKey: idKeyOf(site.env),
    }),
  );
  site.defer(settleQuietly(counted, "ban_count_failed", { route }));
}

/**
 * One refusal: `INCR` of the client's count and, the first time, `PEXPIRE` of `within` (a fixed
 * window from the first refusal). The refusal that brings it to `after` bans the client.
 */
async function refused(ban: BanCount): Promise<void> {
  const counter = banRefusalsKey(ban.prefix, ban.route, ban.limit, ban.hash);
  const [count] = await ban.store.pipeline((b) => b.incr(counter).pexpire(counter, ban.settings.within, true));
  // INCR answers `after` once per window, so one refusal (in one isolate) bans
  if (Number(count) !== ban.settings.after) return;
  const [current] = await ban.store.pipeline((b) => {
    readEntryIn(b, ban.prefix, deny(ban.entry));
    b.del(counter);
  });
  // already denied (another isolate's ban, an operator's entry): the refusals came from isolates
  // that have not read it yet, and are no reason to escalate or to shorten it
  if (inForce(current)) return;
  await escalate(ban);
}

/** The next level of the client's ban, written as a deny entry, counted and logged. */
async function escalate(ban: BanCount): Promise<void> {
  const levelKey = banLevelKey(ban.prefix, ban.route, ban.limit, ban.hash);
  const history = banHistoryMs(ban.settings.for);
  const [reply] = await ban.store.pipeline((b) => b.incr(levelKey).pexpire(levelKey, history));
  const level = Number(reply);
  const until = Date.now() + banDuration(ban.settings.for, level);
  const note = `ban by route "${ban.route}", limit "${ban.limit}", level ${level}`;
  const entry: ListEntry = { ...deny(ban.entry), until, note, source: "ban" };
  const dropped = await writeEntry(ban.store, ban.prefix, entry);
  // the cap on bans in force made room (MAX_BANS): said once, by count (the entries name clients)
  if (dropped.length > 0)
    log("bans_dropped", { route: ban.route, limit: ban.limit, dropped: dropped.length, cap: MAX_BANS });
  await ban.announce();
  ban.lists?.add(ban.prefix, entry);
  ban.metrics.countBan(ban.route, ban.limit);
  const at = new Date(until).toISOString();
  log("ban", { route: ban.route, limit: ban.limit, level, until: at, id: await pseudonym(ban.idKey, ban.hash) });
}

function deny(entry: string): Pick<ListEntry, "kind" | "entry"> {
  return { kind: "deny", entry };
}

/** Whether a deny entry's value, as HGET gave it (none: `null`), is still in force. */
function inForce(value: unknown): boolean {
  if (typeof value !== "string") return false;
  const now = Date.now();
  return decodeEntries([value]).some((e) => e.until > now);
}
