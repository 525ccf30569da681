/**
 * Each client's share of an adaptive report (src/features/rate-limit/adaptive/client-share.ts): whatever the order in
 * which clients' samples arrive, no client holds more than max(FLOOR, share × counted) of what the
 * report counts; a lone client still counts FLOOR; the table of clients stays bounded.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ClientShare, clientTag, FLOOR } from "./client-share.js";
import { loadConfig } from "../../../config/index.js";

/** Feeds `clients` (one sample each, in order) and tallies what counted per client. */
function feed(share: ClientShare, clients: readonly string[]): Map<string, number> {
  const counted = new Map<string, number>();
  for (const c of clients) if (share.admit(c)) counted.set(c, (counted.get(c) ?? 0) + 1);
  return counted;
}

describe("ClientShare", () => {
  it("the attack: one client's 300 samples among 8 others' 40 count no more than a quarter of the report", () => {
    const share = new ClientShare(0.25);
    const attacker = (n: number) => Array.from({ length: n }, () => "203.0.113.66");
    // 20 up front, then 7 after each of the others' samples: 300 in all
    const clients = attacker(20);
    for (let i = 0; i < 40; i++) clients.push(`198.51.100.${i % 8}`, ...attacker(7));
    const counted = feed(share, clients);
    // FLOOR first, then as the others' samples arrive, up to a quarter: 13 of 53
    expect(counted.get("203.0.113.66")).toBe(13);
    expect(share.total).toBe(53);
    for (let i = 0; i < 8; i++) expect(counted.get(`198.51.100.${i}`)).toBe(5);
  });

  it("a lone client counts FLOOR samples of a report, no more", () => {
    const counted = feed(
      new ClientShare(0.25),
      Array.from({ length: 100 }, () => "192.0.2.1"),
    );
    expect(counted.get("192.0.2.1")).toBe(FLOOR);
  });

  it("client_share = 1 counts every sample", () => {
    const share = new ClientShare(1);
    expect(
      feed(
        share,
        Array.from({ length: 100 }, () => "192.0.2.1"),
      ).get("192.0.2.1"),
    ).toBe(100);
  });

  it("property: in any order, every client holds at most max(FLOOR, share × counted), and clients under their bound are never refused", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 6 }), { maxLength: 400 }),
        fc.constantFrom(0.1, 0.25, 0.5, 0.9),
        (order, s) => {
          const share = new ClientShare(s);
          const clients = order.map((i) => `client-${i}`);
          const counted = feed(share, clients);
          const total = [...counted.values()].reduce((a, b) => a + b, 0);
          expect(share.total).toBe(total);
          for (const n of counted.values()) expect(n).toBeLessThanOrEqual(Math.max(FLOOR, s * total));
          // the first FLOOR samples of every client count
          for (const c of new Set(clients))
            expect(counted.get(c)).toBe(
              Math.max(Math.min(FLOOR, clients.filter((x) => x === c).length), counted.get(c)!),
            );
        },
      ),
    );
  });

  it("past its capacity, new clients share one tally (and so one bound): memory stays bounded", () => {
    const share = new ClientShare(0.25, 4);
    const known = ["a", "b", "c", "d"].flatMap((c) => Array(5).fill(c) as string[]);
    const later = Array.from({ length: 20 }, (_, i) => `late-${i}`);
    const counted = feed(share, [...known, ...later]);
    const overflow = later.reduce((sum, c) => sum + (counted.get(c) ?? 0), 0);
    // 20 counted for a…d; the 20 later clients, one each, are one tally: FLOOR, then a quarter
    expect(overflow).toBe(FLOOR);
    expect(share.total).toBe(20 + FLOOR);
  });

  it("tags are 32-bit FNV-1a: stable numbers, different for different clients", () => {
    expect(clientTag("")).toBe(0x811c9dc5);
    expect(clientTag("a")).toBe(0xe40c292c);
    expect(clientTag("203.0.113.1")).not.toBe(clientTag("203.0.113.2"));
  });
});

describe("adaptive.client_share in the configuration", () => {
  const load = (adaptive: Record<string, unknown>) =>
    loadConfig({ ORIGIN_URL: "https://api.example.com", SLUICE: { routes: [{ name: "r", match: "/*", adaptive }] } });

  it("defaults to 0.25, takes (0, 1], and refuses anything else naming the field", () => {
    const r = load({});
    if (!r.ok) throw r.error;
    expect(r.config.routes[0]!.adaptive?.client_share).toBe(0.25);
    for (const bad of [0, 1.5, -1, "half"]) {
      const e = load({ client_share: bad });
      expect(e.ok).toBe(false);
      if (!e.ok) expect(e.error.field).toMatch(/adaptive\.client_share/);
    }
  });
});
