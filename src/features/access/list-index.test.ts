import { describe, expect, it } from "vitest";
import type { RequestFacts } from "../../identity/identify.js";
import { compileEntry, EntryIndex } from "./list-index.js";
import type { ListEntry } from "./lists-store.js";

const entry = (e: string, kind: ListEntry["kind"] = "deny"): ListEntry => ({ kind, entry: e, until: 9e15 });
const facts = (ip: string, headers: Record<string, string> = {}, claims?: Record<string, unknown>): RequestFacts => ({
  ip,
  matchPath: "/",
  headers: new Headers(headers),
  url: new URL("https://x.test/"),
  claims,
});

describe("the lists' index", () => {
  const index = new EntryIndex(
    [
      entry("203.0.113.9"),
      entry("::ffff:203.0.113.10"),
      entry("198.51.100.0/24"),
      entry("2001:db8::/32", "allow"),
      entry("header:x-api-key=k1"),
      entry("header:x-api-key= k2 "),
      entry("jwt:sub=u1"),
    ].map(compileEntry),
  );
  const named = (f: RequestFacts) => index.matching(f).map((e) => e.entry);

  it("finds a single address by its number, however it is written, and ranges by containment", () => {
    expect(named(facts("203.0.113.9"))).toEqual(["203.0.113.9"]);
    expect(named(facts("203.0.113.10"))).toEqual(["::ffff:203.0.113.10"]);
    expect(named(facts("198.51.100.77"))).toEqual(["198.51.100.0/24"]);
    expect(named(facts("2001:db8:1::5"))).toEqual(["2001:db8::/32"]);
    expect(named(facts("192.0.2.1"))).toEqual([]);
    expect(named(facts("unknown"))).toEqual([]);
  });

  it("finds `<part>=<value>` entries by the request's value of each part, without surrounding whitespace", () => {
    expect(named(facts("192.0.2.1", { "x-api-key": "k1" }))).toEqual(["header:x-api-key=k1"]);
    expect(named(facts("192.0.2.1", { "x-api-key": "k2" }))).toEqual(["header:x-api-key= k2 "]);
    expect(named(facts("203.0.113.9", { "x-api-key": "k1" }))).toEqual(["203.0.113.9", "header:x-api-key=k1"]);
    expect(named(facts("192.0.2.1", {}, { sub: "u1" }))).toEqual(["jwt:sub=u1"]);
    expect(named(facts("192.0.2.1", {}, { sub: "constructor" }))).toEqual([]);
    expect(index.claimEntries.map((e) => e.entry)).toEqual(["jwt:sub=u1"]);
  });
});
