import { readPart, trimHttpWhitespace, type RequestFacts } from "../../identity/identify.js";
import { inCidr, parseCidr, parseIp, type Cidr } from "../../identity/cidr.js";
import type { ListEntry } from "./lists-store.js";

/** An entry as the index matches it: its CIDR range, or its key part and value. */
export interface Compiled extends ListEntry {
  cidr?: Cidr;
  part?: string;
  value?: string;
}

/** An entry as `EntryIndex` matches it: its CIDR range, or its key part and value. */
export function compileEntry(e: ListEntry): Compiled {
  const cidr = parseCidr(e.entry);
  if (cidr) return { ...e, cidr };
  const eq = e.entry.indexOf("=");
  // values are compared as readPart gives them: without surrounding whitespace
  return { ...e, part: e.entry.slice(0, eq), value: trimHttpWhitespace(e.entry.slice(eq + 1)) };
}

/**
 * The entries of the lists, indexed by what names a client, so that a request is matched against
 * the few entries that could name it rather than scanned against all (a deployment may hold a
 * thousand bans): single addresses by their number, `<key part>=<value>` entries by part and value
 * (one `readPart` per distinct part), and only the real ranges (`/24`, `/48`) one by one.
 */
export class EntryIndex {
  private readonly byIp = new Map<bigint, Compiled[]>();
  private readonly ranges: Compiled[] = [];
  private readonly byPart = new Map<string, Map<string, Compiled[]>>();
  /** The entries that name a JWT claim (`jwt:sub=…`). */
  readonly claimEntries: Compiled[] = [];

  constructor(readonly entries: readonly Compiled[]) {
    for (const e of entries) {
      if (e.cidr && e.cidr.bits === 128) push(this.byIp, e.cidr.base, e);
      else if (e.cidr) this.ranges.push(e);
      else if (e.part !== undefined && e.value !== undefined) {
        let values = this.byPart.get(e.part);
        if (!values) this.byPart.set(e.part, (values = new Map()));
        push(values, e.value, e);
        if (e.part.startsWith("jwt:")) this.claimEntries.push(e);
      }
    }
  }

  /** Every entry (in force or not, of either kind) that names the client of these facts. */
  matching(facts: RequestFacts): Compiled[] {
    const found: Compiled[] = [];
    const ip = parseIp(facts.ip);
    if (ip !== undefined) {
      found.push(...(this.byIp.get(ip) ?? []));
      for (const e of this.ranges) if (e.cidr && inCidr(ip, e.cidr)) found.push(e);
    }
    for (const [part, values] of this.byPart) {
      const value = readPart(part, facts);
      if (value !== undefined) found.push(...(values.get(value) ?? []));
    }
    return found;
  }
}

function push<K>(map: Map<K, Compiled[]>, key: K, e: Compiled): void {
  const list = map.get(key);
  if (list) list.push(e);
  else map.set(key, [e]);
}
