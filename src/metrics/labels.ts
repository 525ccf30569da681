import type { Config, Limit } from "../config/index.js";
import { parseIp } from "../identity/cidr.js";
import { validEntry } from "../identity/entry.js";
import { readPart, trimHttpWhitespace, type RequestFacts } from "../identity/identify.js";

/** What the dashboard shows of a refused client beside its hash, and the deny entry a ban from its row would write. */
export interface ClientLabel {
  label: string;
  /** Absent when no entry would name this client without keeping a secret whole (an API key). */
  entry?: string;
}

/** A label is for a person reading a table row: a JWT subject longer than this is cut. */
const MAX_LABEL_CHARS = 64;
/** As `banEntry`: the longest entry the admin API takes. */
const MAX_ENTRY_CHARS = 300;
/** Below this many characters, the first and last four would give away most of a secret. */
const SHORT_SECRET = 16;

/**
 * The display label of the client a limit refused (docs/operating.md, Labels of refused clients): its IP (or, when
 * `labels = "masked"`, the /24 or /48 it is in), the ends of an API key or any other
 * header, cookie or query value (never the whole of it), the JWT subject as it is; parts that
 * name no client (`path`, `global`) are left out. A limit keyed on `global` alone is labelled
 * `global`, in every mode (its one bucket is nobody's), with no deny entry. `undefined` under
 * `labels = "off"`, or for a limit that names no client. A part the request did not carry was limited by its IP, as the
 * bucket was.
 *
 * @example clientLabel({ key: ["header:x-api-key"] }, facts, "masked") // { label: "sk_l…9f3a" }
 */
export function clientLabel(
  limit: Pick<Limit, "key">,
  facts: RequestFacts,
  mode: Config["labels"],
): ClientLabel | undefined {
  // a bucket keyed on `global` alone is every client's: its name gives nobody away, in any mode
  if (limit.key.length > 0 && limit.key.every((part) => part === "global")) return { label: "global" };
  if (mode === "off") return undefined;
  const parts = limit.key
    .filter((part) => part !== "path" && part !== "global")
    .map((part) => {
      const value = readPart(part, facts);
      return value === undefined ? { part: "ip", value: facts.ip } : { part, value };
    });
  const first = parts[0];
  if (!first) return undefined;
  const label = parts.map(({ part, value }) => shown(part, value, mode)).join(" · ");
  const entry = entryFor(first.part, first.value, mode);
  return entry === undefined ? { label } : { label, entry };
}

function shown(part: string, value: string, mode: "full" | "masked"): string {
  if (part === "ip") return (mode === "masked" && network(value)) || cut(printable(value));
  if (part === "jwt:sub") return cut(printable(value));
  return ends(value);
}

/**
 * The deny entry that names the client by its first part: the IP (or its network, masked), or the
 * JWT subject; none for other parts, whose entry would keep the secret whole.
 */
function entryFor(part: string, value: string, mode: "full" | "masked"): string | undefined {
  let entry: string | undefined;
  if (part === "ip") entry = mode === "masked" ? network(value) : value;
  else if (part === "jwt:sub" && trimHttpWhitespace(value) === value) entry = `jwt:sub=${value}`;
  return entry !== undefined && entry.length <= MAX_ENTRY_CHARS && validEntry(entry) ? entry : undefined;
}

/**
 * The /24 of an IPv4 address, the /48 of an IPv6 one, as a CIDR the deny list takes; `undefined`
 * for what is not an IP (`unknown`, without CF-Connecting-IP).
 *
 * @example network("203.0.113.9") // "203.0.113.0/24"
 * @example network("2001:db8:1:2::5") // "2001:db8:1::/48"
 */
export function network(ip: string): string | undefined {
  const n = parseIp(ip);
  if (n === undefined) return undefined;
  // v4 lives in ::ffff:0:0/96 (cidr.ts), however it was written
  if (n >> 32n === 0xffffn) return `${(n >> 24n) & 255n}.${(n >> 16n) & 255n}.${(n >> 8n) & 255n}.0/24`;
  const group = (shift: bigint) => ((n >> shift) & 0xffffn).toString(16);
  return `${group(112n)}:${group(96n)}:${group(80n)}::/48`;
}

/**
 * The first and last four characters of a secret with "…" between; of a short one, the first two
 * only; of one of four characters or fewer, nothing.
 *
 * @example ends("sk_live_0123456789abcdef") // "sk_l…cdef"
 */
export function ends(value: string): string {
  const chars = Array.from(printable(value));
  if (chars.length >= SHORT_SECRET) return `${chars.slice(0, 4).join("")}…${chars.slice(-4).join("")}`;
  return chars.length > 4 ? `${chars.slice(0, 2).join("")}…` : "…";
}

/** Control characters would garble a log line or a table cell: shown as "?". */
function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f]/g, "?");
}

function cut(text: string): string {
  const chars = Array.from(text);
  return chars.length > MAX_LABEL_CHARS ? `${chars.slice(0, MAX_LABEL_CHARS - 1).join("")}…` : text;
}
