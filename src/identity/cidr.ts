/**
 * IP addresses and CIDR ranges, v4 and v6, as 128-bit numbers (v4 mapped into ::ffff:0:0/96), so
 * one comparison serves both.
 */
export function parseIp(text: string): bigint | undefined {
  const t = text.trim();
  const v4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(t);
  if (v4) {
    const parts = v4.slice(1).map(Number);
    if (parts.some((p) => p > 255)) return undefined;
    return 0xffff00000000n + parts.reduce((acc, p) => (acc << 8n) + BigInt(p), 0n);
  }
  if (!t.includes(":") || !/^[0-9a-fA-F:.]+$/.test(t)) return undefined;
  const [head, tail, extra] = t.split("::");
  if (extra !== undefined) return undefined;
  const groups = (s: string | undefined) => (s ? s.split(":") : []);
  const h = groups(head);
  const tl = groups(tail);
  // an embedded IPv4 at the end (::ffff:1.2.3.4) counts as two groups
  const last = tl.length ? tl[tl.length - 1] : h[h.length - 1];
  let embedded: bigint | undefined;
  if (last?.includes(".")) {
    embedded = parseIp(last);
    if (embedded === undefined) return undefined;
    (tl.length ? tl : h).pop();
  }
  const width = 8 - (embedded !== undefined ? 2 : 0);
  const missing = width - h.length - tl.length;
  if (tail === undefined ? missing !== 0 : missing < 1) return undefined;
  const all = [...h, ...Array<string>(tail === undefined ? 0 : missing).fill("0"), ...tl];
  if (all.some((g) => !/^[0-9a-fA-F]{1,4}$/.test(g))) return undefined;
  let n = all.reduce((acc, g) => (acc << 16n) + BigInt(parseInt(g, 16)), 0n);
  if (embedded !== undefined) n = (n << 32n) + (embedded & 0xffffffffn);
  return n;
}

export interface Cidr {
  base: bigint;
  bits: number;
}

/** `10.0.0.0/8`, `2001:db8::/32`, or a bare address (a /32 or /128). */
export function parseCidr(text: string): Cidr | undefined {
  const [addr, len] = text.split("/");
  const base = parseIp(addr ?? "");
  if (base === undefined) return undefined;
  const v4 = !(addr ?? "").includes(":");
  const max = v4 ? 32 : 128;
  const bits = len === undefined ? max : Number(len);
  if (!Number.isInteger(bits) || bits < 0 || bits > max || (len !== undefined && !/^\d{1,3}$/.test(len)))
    return undefined;
  return { base, bits: v4 ? bits + 96 : bits };
}

export function inCidr(ip: bigint, c: Cidr): boolean {
  const shift = BigInt(128 - c.bits);
  return ip >> shift === c.base >> shift;
}
