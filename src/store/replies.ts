import { StoreError } from "./deadline.js";

/** Replies as the client gives them: raw from sluice's REST client, maybe deserialised by a caller's own. */
/** HGETALL as an object, whichever shape the client gave it in. */
export function asHash(reply: unknown): Record<string, string> {
  if (!Array.isArray(reply)) return (reply as Record<string, string> | null) ?? {};
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < reply.length; i += 2) out[String(reply[i])] = String(reply[i + 1]);
  return out;
}

/**
 * A Lua script's reply, which sluice's scripts always give as a list (of `shape.length` items, each
 * passing `shape.each`, when the caller knows): anything else is a store that misbehaves (a proxy's
 * error page, a script of another version), answered as the store error it is, never read as a decision.
 */
export function scriptReply(
  reply: unknown,
  script: string,
  shape: { length?: number; each?: (item: unknown) => boolean } = {},
): unknown[] {
  const { length, each } = shape;
  if (!Array.isArray(reply) || (length !== undefined && reply.length !== length) || (each && !reply.every(each)))
    throw new StoreError("error", `unexpected reply from ${script}: ${JSON.stringify(reply).slice(0, 200)}`);
  return reply;
}
