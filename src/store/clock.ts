import { log, messageOf } from "../util/log.js";

/**
 * Where a database's scripts take their clock from. Every script that reads the time (lua/: decide,
 * idempotency, session, adaptive) reads Redis's `TIME` once, at its top, unless the caller passes
 * its own clock as the last argument. Some Redis services refuse `TIME` inside scripts (ElastiCache
 * Serverless answers "ERR This Redis command is not allowed from script"): there the isolate's
 * clock is passed instead, and each script holds it monotone per key (docs/deploy.md, "A Redis
 * that refuses TIME in scripts"). This isolate learns which by trying: the first call that meets
 * the refusal is sent again with the isolate's clock, and when that one answers, the database is
 * on the isolate clock for this isolate, said once in the log, and `TIME` is tried again (one call)
 * after `TIME_RETRY_MS`.
 */

/** `redis`: the scripts read Redis's TIME; `isolate`: TIME is refused, the isolate's clock is passed; `unknown`: no script has run yet. */
export type ClockMode = "redis" | "isolate" | "unknown";

/** How long a database stays on the isolate clock before one call tries `TIME` again. */
export const TIME_RETRY_MS = 10 * 60_000;

/** What health and `npm run check` say of a database's clock. */
export interface ClockReport {
  mode: ClockMode;
  /** On the isolate clock: since when (ISO time), the refusal met, and when `TIME` is tried again. */
  since?: string;
  refusal?: string;
  retry_at?: string;
}

/** The last ARGV of a script given the isolate's clock: "clock:{µs}" (the scripts' prologue reads it). */
export function clockArg(nowMs: number): string {
  return `clock:${Math.floor(nowMs) * 1000}`;
}

/**
 * Whether a script's error reads as a Redis refusing a command inside scripts, as the refusals of
 * `TIME` read: a command flagged `noscript` ("This Redis command is not allowed from script" in
 * Redis 7 and ElastiCache, "... from scripts" before 7, "This Valkey command ..."), Redis before 5
 * refusing writes after it ("Write commands not allowed after non deterministic commands"), an
 * ACL without it ("no permissions to run the 'time' command", "can't run this command or
 * subcommand"), or a renamed command ("Unknown Redis command called from script"). None of these
 * but the ACL's names the command: the caller confirms by running the same call on the isolate's
 * clock, which calls no `TIME`.
 */
export function isTimeRefusal(e: unknown): boolean {
  return TIME_REFUSALS.some((pattern) => pattern.test(messageOf(e)));
}

const TIME_REFUSALS: readonly RegExp[] = [
  /command is not allowed from scripts?\b/i,
  /not allowed after non[- ]?deterministic commands/i,
  /no permissions to run the 'time' command/i,
  /can't run this command or subcommand/i,
  /unknown (redis |valkey )?command called from (lua )?script/i,
];

/** One database's clock as this isolate knows it (shared by every store of that database). */
export class ScriptClock {
  private mode: ClockMode = "unknown";
  private since = 0;
  private refusal = "";
  private retryAt = 0;

  /**
   * Whether a call at `nowMs` passes the isolate's clock: on the isolate clock, until the retry
   * time. The first call past it tries `TIME` (false), and moves the retry time on at once, so
   * the calls running beside it keep passing the clock.
   */
  passes(nowMs: number): boolean {
    if (this.mode !== "isolate") return false;
    if (nowMs < this.retryAt) return true;
    this.retryAt = nowMs + TIME_RETRY_MS;
    return false;
  }

  /** A call that read Redis's TIME answered: the database accepts it (again). */
  accepted(store: string): void {
    if (this.mode === "isolate")
      log("store_clock", { store, clock: "redis", detail: "Redis accepts TIME in scripts again" });
    this.mode = "redis";
  }

  /** Redis refused TIME (`error`), and the same call on the isolate's clock answered. */
  refused(store: string, error: unknown, nowMs: number): void {
    this.retryAt = nowMs + TIME_RETRY_MS;
    if (this.mode === "isolate") return;
    this.mode = "isolate";
    this.since = nowMs;
    this.refusal = messageOf(error);
    log("store_clock", {
      store,
      clock: "isolate",
      detail: `Redis refuses TIME in scripts: the isolate's clock is passed instead, held monotone per key; TIME is tried again in ${TIME_RETRY_MS / 1000} s`,
      message: this.refusal,
    });
  }

  report(): ClockReport {
    if (this.mode !== "isolate") return { mode: this.mode };
    return {
      mode: this.mode,
      since: new Date(this.since).toISOString(),
      refusal: this.refusal,
      retry_at: new Date(this.retryAt).toISOString(),
    };
  }
}
