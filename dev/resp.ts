/**
 * A small RESP2 client over node:net, for the dev bridge and the test helpers.
 *
 * One connection, commands pipelined with a FIFO of pending replies. Bulk and status replies are
 * kept as raw bytes (Buffer) so nothing is lost before the bridge decides how to encode them.
 * Error replies come back as RespError values instead of rejections: a Redis error is an answer,
 * and a pipeline needs it in its slot. Only transport failures reject.
 */
import { connect, type Socket } from "node:net";

/** An error reply from Redis (`-ERR ...`). A value, not an exception. */
export class RespError {
  constructor(readonly message: string) {}
}

export type RespReply = Buffer | number | null | RespError | RespReply[];
export type RespArg = string | Buffer | number;

const CRLF = Buffer.from("\r\n");

/** Encodes one command as a RESP array of bulk strings (the only form Redis accepts for commands). */
export function encodeCommand(args: readonly RespArg[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const arg of args) {
    const bytes = Buffer.isBuffer(arg) ? arg : Buffer.from(String(arg), "utf8");
    parts.push(Buffer.from(`$${bytes.length}\r\n`), bytes, CRLF);
  }
  return Buffer.concat(parts);
}

type Parsed = { value: RespReply; next: number };

/** Reads a line ending at CRLF from `offset`; undefined when the CRLF has not arrived yet. */
function readLine(buf: Buffer, offset: number): { line: string; next: number } | undefined {
  const end = buf.indexOf(CRLF, offset);
  if (end === -1) return undefined;
  return { line: buf.toString("utf8", offset, end), next: end + 2 };
}

function parseInteger(line: string): number {
  if (!/^-?\d+$/.test(line)) throw new Error(`RESP protocol error: bad integer ${JSON.stringify(line)}`);
  return Number(line);
}

/** Parses one reply at `offset`; undefined means "incomplete, wait for more bytes". */
function parseAt(buf: Buffer, offset: number): Parsed | undefined {
  if (offset >= buf.length) return undefined;
  const type = String.fromCharCode(buf[offset] ?? 0);
  const header = readLine(buf, offset + 1);
  if (header === undefined) return undefined;
  switch (type) {
    case "+":
      return { value: Buffer.from(header.line, "utf8"), next: header.next };
    case "-":
      return { value: new RespError(header.line), next: header.next };
    case ":":
      return { value: parseInteger(header.line), next: header.next };
    case "$": {
      const length = parseInteger(header.line);
      if (length < 0) return { value: null, next: header.next };
      // Bulk strings are length-prefixed, so they may contain CRLF: slice by length, not by line.
      const end = header.next + length;
      if (buf.length < end + 2) return undefined;
      return { value: Buffer.from(buf.subarray(header.next, end)), next: end + 2 };
    }
    case "*": {
      const count = parseInteger(header.line);
      if (count < 0) return { value: null, next: header.next };
      const items: RespReply[] = [];
      let next = header.next;
      for (let i = 0; i < count; i++) {
        const item = parseAt(buf, next);
        if (item === undefined) return undefined;
        items.push(item.value);
        next = item.next;
      }
      return { value: items, next };
    }
    default:
      throw new Error(`RESP protocol error: unexpected type byte ${JSON.stringify(type)}`);
  }
}

/** Incremental parser: feed it socket chunks, get back every reply completed so far. */
export class RespParser {
  private buffer: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): RespReply[] {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    const replies: RespReply[] = [];
    let offset = 0;
    for (;;) {
      const parsed = parseAt(this.buffer, offset);
      if (parsed === undefined) break;
      replies.push(parsed.value);
      offset = parsed.next;
    }
    this.buffer = this.buffer.subarray(offset);
    return replies;
  }
}

type Pending = { resolve: (reply: RespReply) => void; reject: (error: Error) => void };

export type RespClientOptions = {
  host?: string;
  port: number;
  /** A connection with replies outstanding and no bytes for this long is dropped (a hung Redis must not hang callers). */
  timeoutMs?: number;
};

export class RespClient {
  private socket: Socket | undefined;
  private parser = new RespParser();
  private pending: Pending[] = [];
  private closed = false;
  private readonly host: string;
  private readonly port: number;
  private readonly timeoutMs: number;

  constructor(options: RespClientOptions) {
    this.host = options.host ?? "127.0.0.1";
    this.port = options.port;
    this.timeoutMs = options.timeoutMs ?? 10_000;
  }

  /** Parses `redis://host:port` (no auth, no db: the dev Redis has neither). */
  static fromUrl(url: string, options: { timeoutMs?: number } = {}): RespClient {
    const parsed = new URL(url);
    if (parsed.protocol !== "redis:") throw new Error(`expected a redis:// URL, got ${url}`);
    const port = parsed.port === "" ? 6379 : Number(parsed.port);
    return new RespClient({ host: parsed.hostname, port, ...options });
  }

  send(args: readonly RespArg[]): Promise<RespReply> {
    return this.sendMany([args]).then((replies) => replies[0] ?? null);
  }

  /** Writes every command in one write, so a MULTI ... EXEC block stays contiguous on the wire. */
  sendMany(commands: readonly (readonly RespArg[])[]): Promise<RespReply[]> {
    if (this.closed) return Promise.reject(new Error("RespClient is closed"));
    if (commands.length === 0) return Promise.resolve([]);
    const socket = this.ensureSocket();
    const replies = commands.map(
      () => new Promise<RespReply>((resolve, reject) => this.pending.push({ resolve, reject })),
    );
    socket.setTimeout(this.timeoutMs);
    socket.write(Buffer.concat(commands.map(encodeCommand)));
    return Promise.all(replies);
  }

  close(): void {
    this.closed = true;
    this.drop(new Error("RespClient is closed"));
  }

  /** Connects lazily: after a drop, the next command opens a fresh connection. */
  private ensureSocket(): Socket {
    if (this.socket !== undefined) return this.socket;
    const socket = connect({ host: this.host, port: this.port });
    socket.setNoDelay(true);
    this.socket = socket;
    this.parser = new RespParser();
    // Handlers check identity so a late event from a dead socket cannot touch its successor.
    socket.on("data", (chunk: Buffer) => {
      if (this.socket === socket) this.onData(chunk);
    });
    socket.on("timeout", () => {
      if (this.socket === socket && this.pending.length > 0) {
        this.drop(new Error(`redis at ${this.host}:${this.port} did not answer within ${this.timeoutMs} ms`));
      }
    });
    socket.on("error", (error) => {
      if (this.socket === socket) this.drop(new Error(`redis at ${this.host}:${this.port}: ${error.message}`));
    });
    socket.on("close", () => {
      if (this.socket === socket) this.drop(new Error(`redis at ${this.host}:${this.port}: connection closed`));
    });
    return socket;
  }

  private onData(chunk: Buffer): void {
    let replies: RespReply[];
    try {
      replies = this.parser.push(chunk);
    } catch (error) {
      this.drop(error instanceof Error ? error : new Error(String(error)));
      return;
    }
    for (const reply of replies) this.pending.shift()?.resolve(reply);
    // Idle connections may stay open forever; only a wait for replies is bounded.
    if (this.pending.length === 0) this.socket?.setTimeout(0);
  }

  /** Forgets the connection and fails every command still waiting on it. */
  private drop(error: Error): void {
    const socket = this.socket;
    this.socket = undefined;
    socket?.destroy();
    const pending = this.pending;
    this.pending = [];
    for (const waiter of pending) waiter.reject(error);
  }
}

/** Renders a reply for logs and assertions: bytes as UTF-8 text. */
export function replyToJs(reply: RespReply): string | number | null | { error: string } | unknown[] {
  if (reply === null || typeof reply === "number") return reply;
  if (reply instanceof RespError) return { error: reply.message };
  if (Buffer.isBuffer(reply)) return reply.toString("utf8");
  return reply.map(replyToJs);
}
