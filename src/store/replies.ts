/** Replies as the client gives them: raw from sluice's REST client, maybe deserialised by a caller's own. */
/** HGETALL as an object, whichever shape the client gave it in. */
export function asHash(reply: unknown): Record<string, string> {
  if (!Array.isArray(reply)) return (reply as Record<string, string> | null) ?? {};
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < reply.length; i += 2) out[String(reply[i])] = String(reply[i + 1]);
  return out;
}
