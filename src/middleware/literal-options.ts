/**
 * The literal types of the middleware's options: what the schemas accept, spelt so that an editor
 * catches a typo (`key: "ipp"`, `period: "1 second"`) before it is a `ConfigError` at run time.
 * `wrangler.toml` is read untyped: these narrow only the options written in TypeScript.
 */

/** A duration: a whole number and a unit (`"500ms"`, `"1s"`, `"15m"`, `"1h"`, `"1d"`), as src/config/duration.ts parses it. */
export type Duration = `${number}${"ms" | "s" | "m" | "h" | "d"}`;

/**
 * The parts of a key, as src/config/primitives.ts's `keyPart` accepts them. A tuple, so that the
 * option types can take its members as `KeyParts[number]` rather than through the `KeyPart` alias:
 * a compiler error then lists them (`Type '"ipp"' is not assignable to type '"ip" | "global" |
 * "path" | `header:${string}` | ...'`) instead of naming an alias the reader has to look up.
 */
type KeyParts = ["ip", "global", "path", `header:${string}`, `query:${string}`, `cookie:${string}`, `jwt:${string}`];

/** One part of a key. */
export type KeyPart = KeyParts[number];

/** The fields of an options type that are durations in it, narrowed to `Duration`. */
type DurationFields = "period" | "warmup" | "max_delay" | "margin" | "lease" | "ttl" | "wait" | "window" | "cooldown";

/**
 * `T` with its key and duration fields narrowed: `key` to a key part or a list of them (a bucket
 * per combination; a function of the context where the schema takes one), a duration to
 * `Duration` (a `lease` also takes `true`/`false`), every other field as the schema's input type has it.
 */
export type Literal<T> = {
  [F in keyof T]: F extends "key"
    ? Exclude<T[F], string | readonly string[]> | KeyParts[number] | ReadonlyArray<KeyParts[number]>
    : F extends DurationFields
      ? Exclude<T[F], string> | (string extends T[F] ? Duration : never)
      : T[F];
};
