/*
 * The server's answer to one call, read from what it sent: a JSON body, or an event stream
 * (`text/event-stream`) whose events may carry notifications and requests of the server before the
 * response for the call's id. sluice keeps that response, never the stream.
 */
import { readCapped } from "../../util/body.js";
import { discardBody } from "../../util/log.js";
import { responseFor, type RpcId, type RpcResponse } from "./jsonrpc.js";

/** The largest answer (a JSON body, or one event of a stream) read for a call's result. */
export const MAX_ANSWER_BYTES = 10 * 1024 * 1024;

/** Whether a response's body is an event stream. */
export function isEventStream(res: Response): boolean {
  return (res.headers.get("content-type") ?? "").toLowerCase().startsWith("text/event-stream");
}

/**
 * The response for `id` in `res`'s body (read from `body`, a copy of it when the client reads the
 * original), or undefined: the body broke off, ended without it, or is not JSON-RPC.
 */
export async function answerOf(
  res: Response,
  body: ReadableStream<Uint8Array> | null,
  id: RpcId,
): Promise<RpcResponse | undefined> {
  if (!body) return undefined;
  if (isEventStream(res)) return responseInStream(body, id);
  try {
    const read = await readCapped(body, MAX_ANSWER_BYTES);
    if (!read.whole) return undefined;
    return responseFor(JSON.parse(new TextDecoder().decode(read.bytes)), id);
  } catch {
    return undefined;
  }
}

/**
 * Reads an event stream until the event whose data is the response for `id` (then stops reading
 * this copy); undefined when the stream ends or breaks first. Events are split on blank lines,
 * their `data:` lines joined with "\n" (the event stream format), other fields ignored.
 */
export async function responseInStream(
  stream: ReadableStream<Uint8Array>,
  id: RpcId,
): Promise<RpcResponse | undefined> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  const events = new EventSplitter();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      const text = done ? decoder.decode() + "\n\n" : decoder.decode(value, { stream: true });
      for (const data of events.push(text)) {
        const found = parsedResponse(data, id);
        if (found) {
          // the response is found: the rest of the stream is not needed, and one already closed has nothing to free
          await discardBody(reader);
          return found;
        }
      }
      if (done || events.overflowed) return undefined;
    }
  } catch {
    return undefined;
  }
}

function parsedResponse(data: string, id: RpcId): RpcResponse | undefined {
  try {
    return responseFor(JSON.parse(data), id);
  } catch {
    return undefined;
  }
}

/** Splits an event stream's text into its events' data, as it arrives. */
class EventSplitter {
  private line = "";
  private data: string[] = [];
  private size = 0;
  overflowed = false;

  /** The data of each event completed by `text`. */
  push(text: string): string[] {
    const complete: string[] = [];
    this.line += text;
    this.size += text.length;
    if (this.size > MAX_ANSWER_BYTES) this.overflowed = true;
    const lines = this.line.split(/\r\n|\r|\n/);
    // the last piece is an unfinished line (a lone "\r" at the end may be half of "\r\n": harmless, an empty line follows)
    this.line = lines.pop() ?? "";
    for (const l of lines) {
      if (l === "") {
        if (this.data.length > 0) complete.push(this.data.join("\n"));
        this.data = [];
        this.size = this.line.length;
      } else if (l.startsWith("data:")) this.data.push(l.slice(l.startsWith("data: ") ? 6 : 5));
    }
    return complete;
  }
}
