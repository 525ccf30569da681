import { discardBody } from "./log.js";
/** What reading a body up to a cap gave: all of it, or the news that it was larger. */
export type CappedBody = { whole: true; bytes: Uint8Array } | { whole: false };

/**
 * Reads a stream into memory, counting bytes as they arrive and stopping (cancelling the stream)
 * as soon as they pass `max`. A declared `Content-Length` is a claim, not a bound: a chunked body
 * declares nothing, so the count while reading is the only cap that holds.
 *
 * @example const body = await readCapped(request.body, 64 * 1024); if (!body.whole) return tooLarge();
 */
export async function readCapped(stream: ReadableStream<Uint8Array> | null, max: number): Promise<CappedBody> {
  if (!stream) return { whole: true, bytes: new Uint8Array(0) };
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > max) {
      await discardBody(reader);
      return { whole: false };
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.length;
  }
  return { whole: true, bytes };
}

/** Whether the request says up front that its body is larger than `max` (a cheap early refusal). */
export function declaresMoreThan(request: Request, max: number): boolean {
  return Number(request.headers.get("content-length") ?? 0) > max;
}
