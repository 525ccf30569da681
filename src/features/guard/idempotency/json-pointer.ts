/**
 * JSON pointers (RFC 6901) into a request's parsed JSON body: what `derive.fields` names.
 * Only the pointers to a member or an element are accepted ("/a/0/b"); the empty pointer (the
 * whole document) is what `derive = true` already is.
 */

/** One `/`-prefixed reference token after another; `~` only as the escapes `~0` (`~`) and `~1` (`/`). */
const POINTER = /^(\/([^~/]|~[01])*)+$/;

/** Whether `text` is a JSON pointer to something inside the document. */
export function isJsonPointer(text: string): boolean {
  return POINTER.test(text);
}

/** The pointer's reference tokens, unescaped (`~1` before `~0`, as RFC 6901 §4 says). */
export function pointerTokens(pointer: string): string[] {
  return pointer
    .slice(1)
    .split("/")
    .map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
}

/** An array index as RFC 6901 spells it: "0", or digits without a leading zero ("-" points past the end: nothing). */
const INDEX = /^(0|[1-9][0-9]*)$/;

/**
 * The value the pointer names in `doc`, or `{ found: false }` when the document has nothing
 * there. Only own members count, so `/__proto__` or `/constructor` never reach an inherited value.
 *
 * @example resolvePointer({ a: [{ "b/c": 1 }] }, "/a/0/b~1c") // { found: true, value: 1 }
 */
export function resolvePointer(doc: unknown, pointer: string): { found: true; value: unknown } | { found: false } {
  let at: unknown = doc;
  for (const token of pointerTokens(pointer)) {
    if (Array.isArray(at)) {
      if (!INDEX.test(token) || Number(token) >= at.length) return { found: false };
      at = at[Number(token)];
    } else if (at !== null && typeof at === "object" && Object.hasOwn(at, token)) {
      at = (at as Record<string, unknown>)[token];
    } else {
      return { found: false };
    }
  }
  return { found: true, value: at };
}
