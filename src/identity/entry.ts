import { parseCidr } from "./cidr.js";

/**
 * Whether `entry` names clients as the deny and allow lists do: an IP, a CIDR range or
 * `<key part>=<value>`; the admin API refuses anything else.
 */
export function validEntry(entry: string): boolean {
  return parseCidr(entry) !== undefined || /^(ip|path|header:[^=]+|query:[^=]+|cookie:[^=]+|jwt:[^=]+)=.+$/.test(entry);
}
