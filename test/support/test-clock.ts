import { readFileSync } from "node:fs";
import { expect } from "vitest";

const CLOCK = "redis.call('TIME')";
const TTL = "'PX', math.max(1, ttl_ms)";

/**
 * decide.lua with a test clock: its one TIME call reads two extra trailing ARGV entries (seconds,
 * microseconds) instead, and TTLs get a day added so that keys never expire on the real clock
 * while the simulated one runs. Everything else is the production script, run by a real Redis.
 */
export function withTestClock(source: string): string {
  expect(source.split(CLOCK).length - 1).toBe(1); // the clock is read exactly once
  expect(source.includes(TTL)).toBe(true);
  return source.replace(CLOCK, "{ ARGV[#ARGV - 1], ARGV[#ARGV] }").replace(TTL, `${TTL} + 86400000`);
}

/** The two trailing ARGV entries `withTestClock` reads, for a time `t` in µs. */
export const clockArgs = (t: number): [string, string] => [String(Math.floor(t / 1e6)), String(t % 1e6)];

/** The production decide.lua with the test clock (`withTestClock`), as its SHA once `redis` has loaded it. */
export async function loadDecideWithTestClock(redis: { scriptLoad(script: string): Promise<string> }): Promise<string> {
  return redis.scriptLoad(withTestClock(readFileSync("lua/decide.lua", "utf8")));
}
