/**
 * The literal types of the middleware's options: what the schemas accept, spelt so that an editor
 * catches a typo (`key: "ipp"`, `period: "1 second"`) before it is a `ConfigError` at run time.
 * `wrangler.toml` is read untyped: these narrow only the options written in TypeScript.
 */

/** A duration: a whole number and a unit (`"500ms"`, `"1s"`, `"15m"`, `"1h"`, `"1d"`), as src/config/duration.ts parses it. */
export type Duration = `${number}${"ms" | "s" | "m" | "h" | "d"}`;

/** One part of a key, as src/config/primitives.ts's `keyPart` accepts it. */
export type KeyPart =
  "ip" | "global" | "path" | `header:${string}` | `query:${string}` | `cookie:${string}` | `jwt:${string}`;

/** A limit's key: one part, or several joined (a bucket per combination). */
export type Key = KeyPart | readonly KeyPart[] | KeyPart[];

/** The fields of an options type that are durations in it, narrowed to `Duration`. */
type DurationFields = "period" | "warmup" | "max_delay" | "margin" | "lease" | "ttl" | "wait" | "window" | "cooldown";

/**
 * `T` with its key and duration fields narrowed: `key` to `Key`, a duration to `Duration` (a
 * `lease` also takes `true`/`false`), every other field as the schema's input type has it.
 */
export type Literal<T> = {
  [F in keyof T]: F extends "key"
    ? Exclude<T[F], string | readonly string[]> | Key
    : F extends DurationFields
      ? Exclude<T[F], string> | (string extends T[F] ? Duration : never)
      : T[F];
};
