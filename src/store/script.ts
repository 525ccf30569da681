import { sha1Hex } from "../util/digest.js";
import { clockArg, isTimeRefusal, type ScriptClock } from "./clock.js";

/**
 * Lua scripts sent so that a cold isolate costs one round trip, not two.
 *
 * The client library's own way (EVALSHA, and EVAL when Redis answers NOSCRIPT) makes every first
 * call of a fresh isolate two requests, and every call that starts before the first one came
 * back too. Here an isolate sends the script's body (EVAL) until it has seen the database run
 * the script, then only its SHA-1 (EVALSHA). When Redis has lost it (flushed, restarted, failed
 * over), NOSCRIPT sends the body once more and the script is cold again until that succeeds.
 *
 * A script that reads Redis's TIME is given the isolate's clock instead where the database
 * refuses TIME in scripts (clock.ts).
 */

/** A script's text and, computed once per isolate when first needed, its SHA-1. */
export class Script {
  private digest: Promise<string> | undefined;
  /** Flagged `no-writes` in its shebang: sent with EVAL_RO / EVALSHA_RO. */
  readonly readOnly: boolean;
  /** Reads Redis's TIME (in its prologue, which also takes a passed clock instead: clock.ts). */
  readonly clocked: boolean;

  constructor(readonly source: string) {
    this.readOnly = /^#!lua[ \t]+flags=[^\r\n]*\bno-writes\b/.test(source);
    this.clocked = /redis\.p?call\(\s*(['"])time\1\s*\)/i.test(source);
  }

  sha(): Promise<string> {
    this.digest ??= sha1Hex(this.source);
    return this.digest;
  }
}

/** The ways to send a script, one request each (`_ro`: read-only scripts). */
export interface ScriptSender {
  eval(source: string, keys: string[], args: string[]): Promise<unknown>;
  evalsha(sha: string, keys: string[], args: string[]): Promise<unknown>;
  evalRo(source: string, keys: string[], args: string[]): Promise<unknown>;
  evalshaRo(sha: string, keys: string[], args: string[]): Promise<unknown>;
}

/** The database's clock as this isolate knows it, and the store's name for the log. */
export interface ClockLine {
  clock: ScriptClock;
  store: string;
}

/**
 * Runs `script` with EVALSHA when `loaded` says this database has run it, else with EVAL, and
 * keeps `loaded` up to date. `abandoned` tells whether the caller gave up already (its budget
 * ran out): a NOSCRIPT reply is then not followed by an EVAL nobody waits for. With `clock`, a
 * script that reads TIME gets the isolate's clock as its last argument while the database refuses
 * TIME; a refusal met on Redis's TIME is confirmed by sending the call again on the isolate's
 * clock at once (the caller still waiting), and only its answer switches the database over.
 */
export async function runScript(
  send: ScriptSender,
  loaded: Set<Script>,
  script: Script,
  keys: string[],
  args: string[],
  abandoned: () => boolean = () => false,
  clock?: ClockLine,
): Promise<unknown> {
  if (!clock || !script.clocked) return runLoaded(send, loaded, script, keys, args, abandoned);
  const passing = clock.clock.passes(Date.now());
  try {
    const reply = await runLoaded(send, loaded, script, keys, passing ? withClock(args) : args, abandoned);
    if (!passing) clock.clock.accepted(clock.store);
    return reply;
  } catch (e) {
    if (passing || !isTimeRefusal(e) || abandoned()) throw e;
    const reply = await runLoaded(send, loaded, script, keys, withClock(args), abandoned);
    clock.clock.refused(clock.store, e, Date.now());
    return reply;
  }
}

/** The arguments with the isolate's clock last. */
function withClock(args: string[]): string[] {
  return [...args, clockArg(Date.now())];
}

/** EVALSHA, or EVAL when the database has not run the script yet (or lost it). */
async function runLoaded(
  send: ScriptSender,
  loaded: Set<Script>,
  script: Script,
  keys: string[],
  args: string[],
  abandoned: () => boolean,
): Promise<unknown> {
  if (loaded.has(script)) {
    try {
      return await (script.readOnly ? send.evalshaRo : send.evalsha)(await script.sha(), keys, args);
    } catch (e) {
      if (!isNoScript(e)) throw e;
      loaded.delete(script);
      if (abandoned()) throw e;
    }
  }
  const reply = await (script.readOnly ? send.evalRo : send.eval)(script.source, keys, args);
  loaded.add(script);
  return reply;
}

/** Redis's answer to an EVALSHA of a script it does not hold. */
export function isNoScript(e: unknown): boolean {
  return /NOSCRIPT/.test(e instanceof Error ? e.message : String(e));
}
