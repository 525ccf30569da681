/**
 * `MONITOR` of the bench's Redis, to tell which commands a script call ran: Redis lists a script's
 * own commands (`[0 lua]`) right after the EVAL/EVALSHA that ran them (a script runs atomically),
 * so each command a script runs can be put down to its call, and the call to decide.lua's mode
 * (`take` on the request path; `release`, `settle` after it). `INFO commandstats` has the totals
 * but cannot split them by call.
 */
import { connect } from "node:net";
import { encodeCommand, RespClient } from "@sluice/dev";

/** One command a client sent, with the commands it ran inside when it is a script call (lower case). */
export interface MonitoredCall {
  command: string;
  args: string[];
  inner: string[];
}

export interface Monitor {
  /** The calls since the last `take()` (or the start), up to a marker sent now through `resp`. */
  take(): Promise<MonitoredCall[]>;
  close(): void;
}

export async function startMonitor(redisUrl: string, resp: RespClient): Promise<Monitor> {
  const url = new URL(redisUrl);
  const socket = connect({ host: url.hostname, port: Number(url.port) });
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  let buffered = "";
  let calls: MonitoredCall[] = [];
  const waiters = new Map<string, () => void>();
  socket.on("data", (chunk: Buffer) => {
    buffered += chunk.toString("utf8");
    const lines = buffered.split("\r\n");
    buffered = lines.pop() ?? "";
    for (const line of lines) {
      const parsed = parseLine(line);
      if (parsed === undefined) continue;
      if (parsed.lua) calls[calls.length - 1]?.inner.push(parsed.command);
      else if (parsed.command === "echo" && waiters.has(parsed.args[0] ?? "")) waiters.get(parsed.args[0] ?? "")?.();
      else calls.push({ command: parsed.command, args: parsed.args, inner: [] });
    }
  });
  socket.write(encodeCommand(["MONITOR"]));
  let marks = 0;
  return {
    async take() {
      const marker = `bench-monitor-mark-${++marks}`;
      const seen = new Promise<void>((resolve) => waiters.set(marker, resolve));
      await resp.send(["ECHO", marker]);
      await seen;
      waiters.delete(marker);
      const out = calls.filter((c) => c.command !== "info" && c.command !== "echo");
      calls = [];
      return out;
    },
    close: () => socket.destroy(),
  };
}

/** `1795443449.609996 [0 127.0.0.1:39898] "eval" "..." "0"` (or `[0 lua]`), quoted as Redis's sdscatrepr does. */
function parseLine(line: string): { lua: boolean; command: string; args: string[] } | undefined {
  const m = /^\+?\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$/.exec(line);
  if (!m) return undefined;
  const words = [...(m[2] ?? "").matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((w) => unquote(w[1] ?? ""));
  if (words.length === 0) return undefined;
  return { lua: m[1] === "lua", command: (words[0] ?? "").toLowerCase(), args: words.slice(1) };
}

function unquote(s: string): string {
  return s.replace(/\\(x[0-9a-fA-F]{2}|.)/g, (_, e: string) =>
    e.length === 3 ? String.fromCharCode(parseInt(e.slice(1), 16)) : ({ n: "\n", r: "\r", t: "\t" }[e] ?? e),
  );
}
