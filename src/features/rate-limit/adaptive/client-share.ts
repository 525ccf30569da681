/*
 * Each client's share of an adaptive report (docs/algorithms.md, Adaptive limit): the limit is everybody's,
 * so no one client may own the samples it is learnt from. A sample counts while its client has
 * fewer than FLOOR counted in this report, or while counting it keeps the client at or below
 * `share` of the report's counted samples; beyond that the client's samples are dropped. Since a
 * client's count only grows while its share allows it, at any moment (and so when the report is
 * sent) every client holds at most max(FLOOR, share × counted) of the report.
 *
 * Clients are told apart by a 32-bit FNV-1a tag of their address: the tag never leaves the
 * isolate (nothing about a client reaches Redis), and the table holds at most MAX_CLIENTS of them;
 * clients past that share one tally (and so one client's bound between them).
 */

/**
 * What a client may count in one report whatever its share: lua/adaptive.lua's MIN_SAMPLES, so
 * that a route with one client or two still closes its windows at the pace of its reports.
 */
export const FLOOR = 10;

/** The most clients one report tells apart (its memory bound). */
export const MAX_CLIENTS = 1_024;

/** The tally clients past MAX_CLIENTS share. */
const OVERFLOW = -1;

/** A client's tag: FNV-1a (32 bits) of its identifier, so the table holds numbers, not client text. */
export function clientTag(client: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < client.length; i++) {
    h ^= client.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** One report's count of counted samples per client. */
export class ClientShare {
  private readonly counts = new Map<number, number>();
  private counted = 0;

  /** `share`: the route's `client_share` (1: every sample counts). */
  constructor(
    private readonly share: number,
    private readonly capacity = MAX_CLIENTS,
  ) {}

  /** Whether `client`'s next sample counts; if it does, it is counted. */
  admit(client: string): boolean {
    if (this.share >= 1) return this.count(OVERFLOW);
    let tag = clientTag(client);
    if (!this.counts.has(tag) && this.counts.size >= this.capacity) tag = OVERFLOW;
    const own = this.counts.get(tag) ?? 0;
    if (own >= FLOOR && own + 1 > this.share * (this.counted + 1)) return false;
    return this.count(tag);
  }

  /** How many samples the report counts. */
  get total(): number {
    return this.counted;
  }

  private count(tag: number): true {
    this.counts.set(tag, (this.counts.get(tag) ?? 0) + 1);
    this.counted += 1;
    return true;
  }
}
