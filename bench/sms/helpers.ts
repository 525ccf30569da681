/** The driver's side of bench/sms/helpers-process.ts: fork it, start its servers, read the providers' arrivals. */
import { type ChildProcess, fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { Cleanup } from "../stack.js";
import type { HelperReply, HelperRequest, Offered } from "./helpers-process.js";

const HELPER = fileURLToPath(new URL("./helpers-process.ts", import.meta.url));

export interface Arrival {
  body: string;
  /** ms since epoch, by the helper's clock (the machine's). */
  at: number;
}

export interface Helpers {
  /** The Upstash-REST bridges, one per Redis URL given, in that order. */
  bridges: string[];
  /** Two providers: [0] takes the burst straight, [1] through sluice. */
  providers: string[];
  arrivals(provider: number, path: string): Promise<Arrival[]>;
  /** POSTs `messages` to the targets in turn from a process of their own; the answers, and when the first left. */
  offer(
    targets: string[],
    path: string,
    messages: number,
    concurrency: number,
  ): Promise<{ answers: Offered[]; startedAt: number; ms: number }>;
}

/** One request at a time over the IPC channel: the next reply is this request's. */
function ask(child: ChildProcess, m: HelperRequest): Promise<HelperReply> {
  return new Promise((resolve, reject) => {
    const onExit = () => reject(new Error("section 13's helper process exited"));
    child.once("exit", onExit);
    child.once("message", (reply: HelperReply) => {
      child.off("exit", onExit);
      if (reply.type === "error") reject(new Error(`section 13's helper process: ${reply.message}`));
      else resolve(reply);
    });
    child.send(m);
  });
}

/** One fork of the helper, stopped by `cleanup` (asked first, killed after 5 s). */
function forkHelper(cleanup: Cleanup, label: string): ChildProcess {
  const child = fork(HELPER, [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  cleanup.add(`section 13's ${label} (pid ${String(child.pid)})`, async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((done) => child.once("exit", () => done()));
    child.send({ type: "stop" } satisfies HelperRequest);
    const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
    await exited;
    clearTimeout(timer);
  });
  return child;
}

/** The servers (bridges to `redisUrls`, two providers) in one fork, the client in another. */
export async function startHelpers(cleanup: Cleanup, redisUrls: string[], token: string): Promise<Helpers> {
  const servers = forkHelper(cleanup, "servers");
  const client = forkHelper(cleanup, "client");
  const ready = await ask(servers, { type: "start", redisUrls, token });
  if (ready.type !== "ready") throw new Error(`section 13's helper process answered ${ready.type} to start`);
  return {
    bridges: ready.bridges,
    providers: ready.providers,
    arrivals: async (provider, path) => {
      const reply = await ask(servers, { type: "arrivals", provider, path });
      if (reply.type !== "arrivals") throw new Error(`section 13's helper process answered ${reply.type}`);
      return reply.list;
    },
    offer: async (targets, path, messages, concurrency) => {
      const reply = await ask(client, { type: "offer", targets, path, messages, concurrency });
      if (reply.type !== "offered") throw new Error(`section 13's helper process answered ${reply.type}`);
      return reply;
    },
  };
}
