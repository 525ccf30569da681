import { readPart, trimHttpWhitespace, type RequestFacts } from "../../identity/identify.js";
import type { Defer } from "../../util/defer.js";
import type { Store } from "../../store/redis.js";
import { inCidr, parseCidr, parseIp, type Cidr } from "../../identity/cidr.js";
import { listField, readEntries, type ListEntry } from "./lists-store.js";

export type { ListEntry } from "./lists-store.js";

interface Compiled extends ListEntry {
  cidr?: Cidr;
  part?: string;
  value?: string;
}

const REFRESH_MS = 5_000;

/** Where the lists are read from: the home region's store, under the deployment's key prefix. */
export interface ListSource {
  prefix: string;
  store: Store | undefined;
}

/**
 * The deny and allow lists as this isolate last read them, refreshed in the background at most
 * every 5 seconds, so the lists cost no Redis call on the request path (an isolate's first request
 * waits for the first load).
 */
export class ListCache {
  private cache: { prefix: string; at: number; entries: Compiled[]; loading?: Promise<void> } | undefined;

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
    return verdictOf(await this.entries(source, defer), facts, route, claimed);
  }

  /** Whether an entry in force names a JWT claim (`jwt:sub=…`): then the request's token must be read first. */
  async namesClaims(source: ListSource, defer: Defer): Promise<boolean> {
    const now = Date.now();
    return (await this.entries(source, defer)).some((e) => e.until > now && e.part?.startsWith("jwt:"));
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
    c.entries = [...c.entries.filter((e) => listField(e) !== field), compileEntry(entry)];
  }

  private async entries(source: ListSource, defer: Defer): Promise<Compiled[]> {
    const now = Date.now();
    let c = this.cache;
    if (!c || c.prefix !== source.prefix) {
      this.cache = c = { prefix: source.prefix, at: 0, entries: [] };
      await refresh(c, source);
    } else if (now - c.at > REFRESH_MS && !c.loading) {
      const held = c;
      held.loading = refresh(held, source).finally(() => (held.loading = undefined));
      defer(held.loading);
    }
    return c.entries;
  }
}

function verdictOf(
  entries: Compiled[],
  facts: RequestFacts,
  route: string | undefined,
  claimed?: Record<string, unknown>,
): "deny" | "allow" | undefined {
  if (entries.length === 0) return undefined;
  const now = Date.now();
  const ip = parseIp(facts.ip);
  const hits = (e: Compiled, seen: RequestFacts) =>
    e.until > now &&
    (e.cidr ? ip !== undefined && inCidr(ip, e.cidr) : e.part !== undefined && readPart(e.part, seen) === e.value);
  const denyFacts = claimed && !facts.claims ? { ...facts, claims: claimed } : facts;
  if (entries.some((e) => e.kind === "deny" && hits(e, denyFacts))) return "deny";
  if (route && entries.some((e) => e.kind === "allow" && (!e.routes || e.routes.includes(route)) && hits(e, facts)))
    return "allow";
  return undefined;
}

async function refresh(c: { at: number; entries: Compiled[] }, source: ListSource): Promise<void> {
  c.at = Date.now();
  if (!source.store) return;
  try {
    c.entries = (await readEntries(source.store, source.prefix)).map(compileEntry);
  } catch {
    // keep the last lists we had: a Redis hiccup must not lift a deny entry
  }
}

/** An entry as `verdictOf` matches it: its CIDR range, or its key part and value. */
function compileEntry(e: ListEntry): Compiled {
  const cidr = parseCidr(e.entry);
  if (cidr) return { ...e, cidr };
  const eq = e.entry.indexOf("=");
  // values are compared as readPart gives them: without surrounding whitespace
  return { ...e, part: e.entry.slice(0, eq), value: trimHttpWhitespace(e.entry.slice(eq + 1)) };
}
