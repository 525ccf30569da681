/*
 * Where a limit charged from the response (docs/algorithms.md, Cost from the response) reads the figure the
 * origin reports: a response header, a field of a JSON body (`json:<path>`), or the last such
 * field in the `data:` of a streamed text/event-stream (`sse:<path>`). The body readers are fed the
 * chunks of sluice's own copy of the body (./response-cost.ts), so they never hold a byte back from
 * the client; each keeps at most BODY_CAP_BYTES (a body, or one event, longer than that reports
 * nothing).
 */

/** A `response = "..."` source, compiled. */
export type ResponseSource = { from: "header"; header: string } | { from: "json" | "sse"; path: readonly string[] };

/** How much of a JSON body, or of one event of a stream, a reader keeps: past it, that one reports nothing. */
export const BODY_CAP_BYTES = 1 << 20;

/** The largest figure read, as a header's 15 digits: the charge is bounded by `max` anyway. */
const MAX_FIGURE = 999_999_999_999_999;

const SOURCES = '"header:<name>", "json:<path>" or "sse:<path>"';
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;
/** Dot-separated keys or array indexes, at most 16: `usage.total_tokens`, `choices.0.usage.total_tokens`. */
const FIELD_PATH = /^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+){0,15}$/;

/**
 * `response = "header:<name>" | "json:<path>" | "sse:<path>"` compiled, or the configuration's
 * complaint. `trailer:` is refused by name: a Worker's fetch() exposes no HTTP trailers (the Fetch
 * standard's `trailers` is still a proposal), so such a limit would silently never settle.
 */
export function parseResponseSource(text: string): ResponseSource | string {
  const at = text.indexOf(":");
  const kind = text.slice(0, Math.max(at, 0));
  const rest = text.slice(at + 1);
  if (kind === "header" && HEADER_NAME.test(rest)) return { from: "header", header: rest.toLowerCase() };
  if ((kind === "json" || kind === "sse") && FIELD_PATH.test(rest)) return { from: kind, path: rest.split(".") };
  if (kind === "trailer")
    return `cannot be a trailer: a Worker's fetch() does not expose HTTP trailers; use ${SOURCES}`;
  return `must be ${SOURCES}, a path being dot-separated keys or array indexes (e.g. "sse:usage.total_tokens")`;
}

/** The figure at `path` in a parsed JSON value: a whole number from 0, else undefined. */
export function figureAt(value: unknown, path: readonly string[]): number | undefined {
  let at: unknown = value;
  for (const key of path) {
    if (Array.isArray(at)) at = /^\d+$/.test(key) ? at[Number(key)] : undefined;
    // own keys only: a path never reaches a prototype's `constructor` or `__proto__`
    else if (at !== null && typeof at === "object" && Object.hasOwn(at, key)) at = (at as Record<string, unknown>)[key];
    else return undefined;
  }
  return typeof at === "number" && Number.isInteger(at) && at >= 0 && at <= MAX_FIGURE ? at : undefined;
}

/** The figure at `path` in JSON text; undefined when the text is not JSON. */
export function figureInJson(text: string, path: readonly string[]): number | undefined {
  try {
    return figureAt(JSON.parse(text), path);
  } catch {
    return undefined;
  }
}

/** Reads a figure from a body: fed each chunk as it passes, asked once the body has ended (or was cut). */
export interface FigureReader {
  push(chunk: Uint8Array): void;
  /** The figure the bytes seen report; undefined when they report none. Called once, at the end. */
  figure(): number | undefined;
}

/** `json:<path>`: keeps the body's text up to `cap` bytes, read once it has ended (a body cut short does not parse). */
export function jsonFigures(path: readonly string[], cap = BODY_CAP_BYTES): FigureReader {
  const decoder = new TextDecoder();
  let text = "";
  let size = 0;
  return {
    push(chunk) {
      if (size > cap) return;
      size += chunk.byteLength;
      // decoded as it comes (a copy): the chunk itself goes on to the client untouched
      text = size > cap ? "" : text + decoder.decode(chunk, { stream: true });
    },
    figure: () => (size > cap ? undefined : figureInJson(text + decoder.decode(), path)),
  };
}

/** Whether a response is a server-sent event stream. */
export function isEventStream(headers: Headers): boolean {
  return /^\s*text\/event-stream\s*(;|$)/i.test(headers.get("content-type") ?? "");
}

/**
 * `sse:<path>`: scans a text/event-stream as it passes (the WHATWG event-stream format: lines
 * ended by CRLF, LF or CR, anywhere across chunks; an event's `data:` lines joined by "\n" and
 * dispatched at a blank line) and keeps the LAST figure found at `path` in an event's JSON data:
 * OpenAI's final chunk carries the whole usage, Anthropic's `message_delta` the running total.
 * Other fields, comments, `[DONE]` and data that is not JSON are skipped; so is an event longer
 * than `cap` characters. An event left open when the stream ends is read too (a stream that ended
 * without its final blank line).
 */
export class SseFigures implements FigureReader {
  private readonly decoder = new TextDecoder();
  /** The line being read, not yet ended. */
  private partial = "";
  /** The last chunk ended with CR: a LF opening the next one ends no new line. */
  private afterCR = false;
  /** The current line outgrew the cap: what is left of it is dropped at its end. */
  private skipLine = false;
  private data: string[] = [];
  private size = 0;
  /** The current event outgrew the cap: its data is dropped, and the rest of it until its end. */
  private broken = false;
  private last: number | undefined;

  constructor(
    private readonly path: readonly string[],
    private readonly cap = BODY_CAP_BYTES,
  ) {}

  push(chunk: Uint8Array): void {
    this.scan(this.decoder.decode(chunk, { stream: true }));
  }

  figure(): number | undefined {
    this.scan(this.decoder.decode());
    if (this.partial !== "" && !this.skipLine) this.line(this.partial);
    this.partial = "";
    this.dispatch();
    return this.last;
  }

  private scan(decoded: string): void {
    const text = this.afterCR && decoded.startsWith("\n") ? decoded.slice(1) : decoded;
    if (text === "") return;
    this.afterCR = text.endsWith("\r");
    const lines = (this.partial + text).split(/\r\n|\r|\n/);
    this.partial = lines.pop() ?? "";
    for (const line of lines) {
      if (this.skipLine) this.skipLine = false;
      else this.line(line);
    }
    if (this.partial.length > this.cap) {
      this.partial = "";
      this.data = [];
      this.skipLine = this.broken = true;
    }
  }

  private line(line: string): void {
    if (line === "") return this.dispatch();
    const colon = line.indexOf(":");
    if ((colon < 0 ? line : line.slice(0, colon)) !== "data") return;
    if (this.broken) return;
    const value = colon < 0 ? "" : line.slice(colon + 1);
    this.data.push(value.startsWith(" ") ? value.slice(1) : value);
    this.size += value.length + 1;
    if (this.size <= this.cap) return;
    this.broken = true;
    this.data = [];
  }

  private dispatch(): void {
    const text = this.data.join("\n");
    if (text !== "" && text !== "[DONE]") this.last = figureInJson(text, this.path) ?? this.last;
    this.data = [];
    this.size = 0;
    this.broken = false;
  }
}

/**
 * The reader of a body source. `sse:` reads a response that is not an event stream as one JSON body:
 * LLM APIs answer `stream: false` with JSON holding the usage at the same path.
 */
export function figureReader(source: ResponseSource, headers: Headers): FigureReader | undefined {
  if (source.from === "header") return undefined;
  return source.from === "sse" && isEventStream(headers) ? new SseFigures(source.path) : jsonFigures(source.path);
}
