import type { Config } from "../config/index.js";
import type { Env } from "../env.js";
import { readPart, trimHttpWhitespace, type RequestFacts } from "../keys/identify.js";
import { regionStore } from "../region/index.js";
import type { Defer } from "../limiter/decide.js";
import { inCidr, parseCidr, parseIp, type Cidr } from "./cidr.js";

/** An entry of the deny or allow list: an IP, a CIDR range, or `<key part>=<value>` (e.g. `header:x-api-key=k1`). */
export interface ListEntry {
  kind: "deny" | "allow";
  entry: string;
  /** ms since epoch */
  until: number;
  /** allow entries: the routes whose limits are skipped (all when absent) */
  routes?: string[];
  note?: string;
}

interface Compiled extends ListEntry {
  cidr?: Cidr;
  part?: string;
  value?: string;
}

/** The lists live in the home region's Redis: one hash, field `{kind}:{entry}`, value the JSON entry. */
export const listsKey = (prefix: string) => `${prefix}:lists`;

const REFRESH_MS = 5_000;
let cache: { prefix: string; at: number; entries: Compiled[]; loading?: Promise<void> } | undefined;

/** Whether `entry` is an IP, a CIDR range or `<key part>=<value>`; the admin API refuses anything else. */
export function validEntry(entry: string): boolean {
  return parseCidr(entry) !== undefined || /^(ip|path|header:[^=]+|query:[^=]+|cookie:[^=]+|jwt:[^=]+)=.+$/.test(entry);
}

/**
 * What the lists say about a request: `deny`, `allow` (skip this route's limits) or nothing.
 * Read from an isolate cache refreshed in the background at most every 5 seconds, so the lists
 * cost no Redis call on the request path (an isolate's first request waits for the first load).
 */
export async function listVerdict(config: Config, env: Env, facts: RequestFacts, route: string | undefined, defer: Defer): Promise<"deny" | "allow" | undefined> {
  const entries = await currentEntries(config, env, defer);
  if (entries.length === 0) return undefined;
  const now = Date.now();
  const ip = parseIp(facts.ip);
  const hits = (e: Compiled) => e.until > now && (e.cidr ? ip !== undefined && inCidr(ip, e.cidr) : e.part !== undefined && readPart(e.part, facts) === e.value);
  if (entries.some((e) => e.kind === "deny" && hits(e))) return "deny";
  if (route && entries.some((e) => e.kind === "allow" && (!e.routes || e.routes.includes(route)) && hits(e))) return "allow";
  return undefined;
}

async function currentEntries(config: Config, env: Env, defer: Defer): Promise<Compiled[]> {
  const now = Date.now();
  if (!cache || cache.prefix !== config.key_prefix) {
    cache = { prefix: config.key_prefix, at: 0, entries: [] };
    await refresh(config, env);
  } else if (now - cache.at > REFRESH_MS && !cache.loading) {
    const c = cache;
    c.loading = refresh(config, env).finally(() => (c.loading = undefined));
    defer(c.loading);
  }
  return cache.entries;
}

async function refresh(config: Config, env: Env): Promise<void> {
  const c = cache;
  if (!c) return;
  c.at = Date.now();
  const store = regionStore(env, config, config.home_region);
  if (!store) return;
  try {
    c.entries = parseEntries(await store.redis.hgetall(listsKey(config.key_prefix)));
  } catch {
    // keep the last lists we had: a Redis hiccup must not lift a deny entry
  }
}

/** HGETALL, as an object or as the flat [field, value, ...] list the client gives without deserialisation. */
export function parseEntries(reply: unknown): Compiled[] {
  const values: unknown[] = Array.isArray(reply) ? reply.filter((_, i) => i % 2 === 1) : Object.values((reply ?? {}) as Record<string, unknown>);
  return values.flatMap((v): Compiled[] => {
    try {
      const e = (typeof v === "string" ? JSON.parse(v) : v) as ListEntry;
      const cidr = parseCidr(e.entry);
      if (cidr) return [{ ...e, cidr }];
      const eq = e.entry.indexOf("=");
      // values are compared as readPart gives them: without surrounding whitespace
      return [{ ...e, part: e.entry.slice(0, eq), value: trimHttpWhitespace(e.entry.slice(eq + 1)) }];
    } catch {
      return [];
    }
  });
}
