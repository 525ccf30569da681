import { connect, type Socket } from "node:net";

/**
 * HTTP/1.1 over a bare socket, for the tests that a fetch client would spoil: header values with
 * surrounding whitespace, `Expect: 100-continue`, chunked request bodies with no Content-Length,
 * client-sent forwarding headers. The bytes written are exactly the ones given (plus `Host`,
 * `Connection: close` and the body framing, each only when the caller did not write its own);
 * the answer is parsed by hand: interim `1xx` responses are collected and skipped, the final
 * response's body is read by `Content-Length`, by chunks, or to the end of the connection.
 */

export interface RawResponse {
  status: number;
  reason: string;
  /** Header names lower-cased; repeated headers joined with ", ". */
  headers: Record<string, string>;
  /** The header lines as received, in order. */
  rawHeaders: Array<[string, string]>;
  body: Buffer;
  text: string;
  /** Statuses of the interim (1xx) responses that came before the final one. */
  interim: number[];
  /** Request bytes written before the final response's head arrived, and in all. */
  bytesSentBeforeAnswer: number;
  bytesSent: number;
  /** Whether the whole request body was written (the server may answer before it is). */
  bodyComplete: boolean;
  json<T = Record<string, unknown>>(): T;
}

/** A header line: `[name, value]` is written as `name: value` with the value verbatim (whitespace kept); a string is written as the whole line. */
export type RawHeader = [string, string] | string;

export interface RawRequest {
  port: number;
  host?: string;
  method: string;
  /** The request target, written as given (`/a%2Fb?x=1`). */
  target: string;
  headers?: RawHeader[];
  /** The body; with `chunked`, sent as `Transfer-Encoding: chunked` in pieces of `chunkSize` bytes (default 64 KiB). */
  body?: string | Buffer;
  chunked?: boolean;
  chunkSize?: number;
  /**
   * For `Expect: 100-continue`: write the head, then wait for a `100 Continue` (or a final answer,
   * or this many ms, as curl does) before writing the body.
   */
  awaitContinueMs?: number;
  /** Give up after this long with an error saying what was received (default 10 s). */
  timeoutMs?: number;
}

/** The port of a URL such as the one `await mf.ready` gives. */
export const portOf = (url: URL | string) => Number(new URL(String(url)).port);

/**
 * Sends one request on a fresh connection and resolves with the final response.
 *
 * @example const r = await rawRequest({ port, method: "GET", target: "/x", headers: [["CF-Connecting-IP", "203.0.113.9"], "X-Api-Key: k1 \t"] });
 */
export function rawRequest(req: RawRequest): Promise<RawResponse> {
  const lines = (req.headers ?? []).map((h) => (typeof h === "string" ? h : `${h[0]}: ${h[1]}`));
  const has = (name: string) => lines.some((l) => l.slice(0, l.indexOf(":")).trim().toLowerCase() === name);
  const body =
    req.body === undefined ? undefined : typeof req.body === "string" ? Buffer.from(req.body, "utf8") : req.body;
  if (!has("host")) lines.unshift(`Host: ${req.host ?? "127.0.0.1"}:${req.port}`);
  if (!has("connection")) lines.push("Connection: close");
  if (body !== undefined && req.chunked && !has("transfer-encoding")) lines.push("Transfer-Encoding: chunked");
  if (body !== undefined && !req.chunked && !has("content-length")) lines.push(`Content-Length: ${body.length}`);
  const head = Buffer.from(
    `${req.method} ${req.target} HTTP/1.1\r\n${lines.map((l) => `${l}\r\n`).join("")}\r\n`,
    "latin1",
  );

  const pieces: Buffer[] = [];
  if (body !== undefined) {
    if (req.chunked) {
      const size = req.chunkSize ?? 64 * 1024;
      for (let at = 0; at < body.length; at += size) {
        const part = body.subarray(at, Math.min(body.length, at + size));
        pieces.push(Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from("\r\n")]));
      }
      pieces.push(Buffer.from("0\r\n\r\n"));
    } else if (body.length > 0) {
      for (let at = 0; at < body.length; at += 64 * 1024)
        pieces.push(body.subarray(at, Math.min(body.length, at + 64 * 1024)));
    }
  }
  return exchange(req, head, pieces);
}

function exchange(req: RawRequest, head: Buffer, pieces: Buffer[]): Promise<RawResponse> {
  const timeoutMs = req.timeoutMs ?? 10_000;
  const isHead = req.method.toUpperCase() === "HEAD";
  return new Promise<RawResponse>((resolve, reject) => {
    const socket: Socket = connect({ host: "127.0.0.1", port: req.port });
    let buf: Buffer = Buffer.alloc(0);
    const interim: number[] = [];
    let final:
      | {
          status: number;
          reason: string;
          rawHeaders: Array<[string, string]>;
          framing: "none" | "length" | "chunked" | "close";
          length: number;
        }
      | undefined;
    const bodyParts: Buffer[] = [];
    let chunkState: { need: number } | undefined; // bytes of the current chunk still to come (+2 for its CRLF)
    let settled = false;
    let sent = 0;
    let sentBeforeAnswer = -1;
    let bodyComplete = pieces.length === 0;
    let writeError: string | undefined;
    const waiters: Array<() => void> = [];
    const wake = () => waiters.splice(0).forEach((w) => w());

    const timer = setTimeout(() => {
      fail(
        new Error(
          `raw HTTP ${req.method} ${req.target}: no complete response within ${timeoutMs} ms (received ${buf.length} unparsed bytes${final ? `, final status ${final.status} with ${bodyParts.reduce((n, b) => n + b.length, 0)} body bytes` : ""}; interim ${JSON.stringify(interim)}; sent ${sent} bytes${writeError ? `; write error ${writeError}` : ""}): ${preview(buf)}`,
        ),
      );
    }, timeoutMs);

    function fail(e: Error) {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      wake();
      reject(e);
    }

    function finish() {
      if (settled || !final) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      wake();
      const body = Buffer.concat(bodyParts);
      const headers: Record<string, string> = {};
      for (const [k, v] of final.rawHeaders) {
        const name = k.toLowerCase();
        headers[name] = name in headers ? `${headers[name]}, ${v}` : v;
      }
      const text = body.toString("utf8");
      resolve({
        status: final.status,
        reason: final.reason,
        headers,
        rawHeaders: final.rawHeaders,
        body,
        text,
        interim,
        bytesSentBeforeAnswer: sentBeforeAnswer < 0 ? sent : sentBeforeAnswer,
        bytesSent: sent,
        bodyComplete,
        json: <T>() => {
          try {
            return JSON.parse(text) as T;
          } catch {
            throw new Error(
              `raw HTTP ${req.method} ${req.target}: status ${final!.status}, body is not JSON: ${text.slice(0, 300)}`,
            );
          }
        },
      });
    }

    /** Consumes what it can from `buf`; returns when it needs more bytes. */
    function parse() {
      for (;;) {
        if (settled) return;
        if (!final) {
          const end = buf.indexOf("\r\n\r\n");
          if (end < 0) return;
          const lines = buf.subarray(0, end).toString("latin1").split("\r\n");
          buf = buf.subarray(end + 4);
          const m = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(lines[0] ?? "");
          if (!m)
            return fail(
              new Error(
                `raw HTTP ${req.method} ${req.target}: not an HTTP/1.x status line: ${JSON.stringify(lines[0])}`,
              ),
            );
          const status = Number(m[1]);
          const rawHeaders = lines.slice(1).map((l): [string, string] => {
            const colon = l.indexOf(":");
            return [l.slice(0, colon).trim(), l.slice(colon + 1).trim()];
          });
          if (status >= 100 && status < 200 && status !== 101) {
            interim.push(status);
            wake();
            continue;
          }
          sentBeforeAnswer = sent;
          const get = (n: string) => rawHeaders.find(([k]) => k.toLowerCase() === n)?.[1];
          const te = get("transfer-encoding");
          const cl = get("content-length");
          const framing =
            isHead || status === 204 || status === 304
              ? "none"
              : te && /chunked/i.test(te)
                ? "chunked"
                : cl !== undefined
                  ? "length"
                  : "close";
          final = { status, reason: m[2] ?? "", rawHeaders, framing, length: Number(cl ?? 0) };
          wake();
          if (framing === "none") return finish();
        }
        if (final.framing === "length") {
          const have = bodyParts.reduce((n, b) => n + b.length, 0);
          const take = Math.min(buf.length, final.length - have);
          if (take > 0) bodyParts.push(buf.subarray(0, take));
          buf = buf.subarray(take);
          if (have + take >= final.length) return finish();
          return;
        }
        if (final.framing === "close") {
          if (buf.length > 0) bodyParts.push(buf);
          buf = Buffer.alloc(0);
          return;
        }
        // chunked
        if (chunkState) {
          if (buf.length < chunkState.need) return;
          bodyParts.push(buf.subarray(0, chunkState.need - 2));
          buf = buf.subarray(chunkState.need);
          chunkState = undefined;
          continue;
        }
        const eol = buf.indexOf("\r\n");
        if (eol < 0) return;
        const size = parseInt(buf.subarray(0, eol).toString("latin1").split(";")[0] as string, 16);
        if (Number.isNaN(size))
          return fail(
            new Error(`raw HTTP ${req.method} ${req.target}: bad chunk size line ${preview(buf.subarray(0, eol))}`),
          );
        if (size === 0) {
          // trailers (usually none), then an empty line
          const rest = buf.subarray(eol + 2);
          if (rest.subarray(0, 2).toString("latin1") === "\r\n" || rest.indexOf("\r\n\r\n") >= 0) return finish();
          return;
        }
        buf = buf.subarray(eol + 2);
        chunkState = { need: size + 2 };
      }
    }

    socket.on("data", (d: Buffer) => {
      buf = buf.length === 0 ? d : Buffer.concat([buf, d]);
      parse();
    });
    socket.on("end", () => {
      if (final?.framing === "close") return finish();
      // a server may reset the connection after answering early: whatever arrived is parsed above
      setImmediate(() =>
        fail(
          new Error(
            `raw HTTP ${req.method} ${req.target}: connection closed before a complete response (interim ${JSON.stringify(interim)}, final ${final?.status ?? "none"}, sent ${sent} bytes): ${preview(buf)}`,
          ),
        ),
      );
    });
    socket.on("error", (e: NodeJS.ErrnoException) => {
      // EPIPE / ECONNRESET while we are still writing a body the server refused: keep what was read
      writeError = e.code ?? e.message;
      if (final && final.framing === "close") return finish();
      setImmediate(() =>
        fail(
          new Error(
            `raw HTTP ${req.method} ${req.target}: socket error ${e.code ?? e.message} before a complete response (interim ${JSON.stringify(interim)}, final ${final?.status ?? "none"}, sent ${sent} bytes): ${preview(buf)}`,
          ),
        ),
      );
    });

    const until = (cond: () => boolean, ms: number) =>
      new Promise<void>((res) => {
        if (cond() || settled) return res();
        const t = setTimeout(res, ms);
        const check = () => {
          if (cond() || settled) {
            clearTimeout(t);
            res();
          } else waiters.push(check);
        };
        waiters.push(check);
      });

    const write = (b: Buffer) =>
      new Promise<boolean>((res) => {
        if (settled || socket.destroyed) return res(false);
        const more = socket.write(b, (err) => {
          if (err) writeError = err.message;
        });
        sent += b.length;
        if (more) return res(true);
        const onDrain = () => {
          clearInterval(poll);
          res(!settled && !socket.destroyed);
        };
        socket.once("drain", onDrain);
        // the server may answer (and stop reading) while we wait for the buffer to drain
        const poll = setInterval(() => {
          if (settled || socket.destroyed || final) {
            clearInterval(poll);
            socket.off("drain", onDrain);
            res(false);
          }
        }, 20);
      });

    socket.once("connect", async () => {
      if (!(await write(head))) return;
      if (pieces.length > 0 && req.awaitContinueMs !== undefined) {
        await until(() => interim.includes(100) || final !== undefined, req.awaitContinueMs);
        if (final) return; // answered without wanting the body
      }
      for (const p of pieces) {
        if (final && final.framing !== "none" && !settled) {
          // answered already: a real client stops sending too
          return;
        }
        if (!(await write(p))) return;
      }
      bodyComplete = true;
    });
  });
}

function preview(b: Buffer): string {
  return JSON.stringify(b.subarray(0, 400).toString("latin1"));
}
