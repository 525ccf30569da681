import * as z from "zod/mini";

// zod constructs a schema eagerly and dearly (every method bound per instance, `.check` a clone),
// and a Worker pays for what its top level builds on every cold start. So the configuration's
// schemas are built when first used: the module-level ones through `lazy`, and a field's schema
// that a configuration may leave out (a feature's table, an optional setting) through `deferred`,
// so that the options of a middleware build only the schemas of what they set.

/**
 * A value built on first call, then the same one. A module-level call is written
 * `/* @__PURE__ *\/ lazy(...)`: the bundler cannot see that the call only keeps its argument, and
 * would otherwise keep every schema of a module any of whose exports a Worker uses (esbuild 0.25 does
 * not carry a `@__NO_SIDE_EFFECTS__` of this declaration to the calls in other modules).
 *
 * @example const settings = /* @__PURE__ *\/ lazy(() => z.strictObject({ ... })); settings().parse(input)
 */
export function lazy<T>(build: () => T): () => T {
  let built: { value: T } | undefined;
  return () => (built ??= { value: build() }).value;
}

/**
 * A schema built when a value reaches it: for the inner schema of `z.optional` or `z._default`,
 * whose absent field never builds it. The inner schema must be neither optional nor defaulted:
 * its `optin` / `optout` are pinned to "required" (undefined), which z.optional and an object's
 * scan of its keys would otherwise build it to ask.
 */
export function deferred<T extends z.core.SomeType>(build: () => T): z.ZodMiniLazy<T> {
  const schema = z.lazy(build);
  Object.defineProperty(schema._zod, "optin", { value: undefined });
  Object.defineProperty(schema._zod, "optout", { value: undefined });
  return schema;
}
