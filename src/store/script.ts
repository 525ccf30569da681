/**
 * Lua scripts sent so that a cold isolate costs one round trip, not two.
 *
 * The client library's own way (EVALSHA, and EVAL when Redis answers NOSCRIPT) makes every first
 * call of a fresh isolate two requests, and every call that starts before the first one came
 * back too. Here an isolate sends the script's body (EVAL) until it has seen the database run
 * the script, then only its SHA-1 (EVALSHA). When Redis has lost it (flushed, restarted, failed
 * over), NOSCRIPT sends the body once more and the script is cold again until that succeeds.
 */

/** A script's text and, computed once per isolate when first needed, its SHA-1. */
export class Script {
  private digest: Promise<string> | undefined;
  /** Flagged `no-writes` in its shebang: sent with EVAL_RO / EVALSHA_RO. */
  readonly readOnly: boolean;

  constructor(readonly source: string) {
    this.readOnly = /^#!lua[ \t]+flags=[^\r\n]*\bno-writes\b/.test(source);
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

/**
 * Runs `script` with EVALSHA when `loaded` says this database has run it, else with EVAL, and
 * keeps `loaded` up to date. `abandoned` tells whether the caller gave up already (its budget
 * ran out): a NOSCRIPT reply is then not followed by an EVAL nobody waits for.
 */
export async function runScript(
  send: ScriptSender,
  loaded: Set<Script>,
  script: Script,
  keys: string[],
  args: string[],
  abandoned: () => boolean = () => false,
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

async function sha1Hex(text: string): Promise<string> {
  const bytes = new Uint8Array(await crypto.subtle.digest("SHA-1", new TextEncoder().encode(text)));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
