import { parseCidr } from "../../identity/cidr.js";

/**
 * What a ban from a row of the top refused clients denies, in the words the operator confirms
 * before anything is written: a range says it is one (how many addresses, from which to which),
 * since a masked label (`labels = "masked"`, the default) names the client's /24 or /48, never
 * the client alone. The page adds how long, and the request it will send.
 *
 * @example banWarning("127.0.0.0/24") // "Ban the whole range 127.0.0.0/24: 256 addresses, 127.0.0.0 to 127.0.0.255, every client in it, not only the one refused. …"
 */
export function banWarning(entry: string): string {
  return `${whom(entry)} Its requests get 403 on every path the deny list guards, until the ban ends.`;
}

function whom(entry: string): string {
  const cidr = parseCidr(entry);
  if (!cidr) {
    const [part, value] = [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)];
    if (part === "jwt:sub")
      return `Ban the JWT subject "${value}": every request whose verified token names it, from any address.`;
    return `Ban every request whose ${part} is "${value}".`;
  }
  const hostBits = 128 - cidr.bits;
  if (hostBits === 0) return `Ban the one address ${entry}.`;
  if (entry.includes(":"))
    return `Ban the whole range ${entry}: 2^${hostBits} addresses, every client in it, not only the one refused.`;
  const first = cidr.base & ~((1n << BigInt(hostBits)) - 1n);
  const last = first + (1n << BigInt(hostBits)) - 1n;
  return `Ban the whole range ${entry}: ${(1n << BigInt(hostBits)).toLocaleString("en")} addresses, ${v4(first)} to ${v4(last)}, every client in it, not only the one refused.`;
}

/** The dotted form of an IPv4 address kept as a v4-mapped 128-bit number. */
function v4(n: bigint): string {
  return [24n, 16n, 8n, 0n].map((shift) => String((n >> shift) & 255n)).join(".");
}
