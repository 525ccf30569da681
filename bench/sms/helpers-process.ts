/**
 * Section 13's servers and its client in processes of their own (one fork serves, another offers):
 * the two bridges (one per region's Redis), the two providers (straight and through sluice), and
 * the burst of POSTs. In one process they would share its one
 * event loop with the 2,000 requests offered, and the gateway could take the burst in no faster
 * than that loop answers (slower than the limit on 2 cores, so the queue would hardly be used), and
 * each arrival's time would wait behind the driver's work. Started by `fork` (the driver's tsx
 * loader comes along in execArgv); it talks over the IPC channel, see {@link HelperRequest}.
 */
import { type Bridge, type DemoOrigin, startBridge, startOrigin } from "@sluice/dev";
import { messageBody } from "./figures.js";

/** The answer to one offer. */
export interface Offered {
  status: number;
  /** The `Sluice-Decision` header, "" when none. */
  decision: string;
}

/** What the driver asks. */
export type HelperRequest =
  | { type: "start"; redisUrls: string[]; token: string }
  | { type: "offer"; targets: string[]; path: string; messages: number; concurrency: number }
  | { type: "arrivals"; provider: number; path: string }
  | { type: "stop" };

/** What the helper answers. */
export type HelperReply =
  | { type: "ready"; bridges: string[]; providers: string[] }
  | { type: "arrivals"; list: Array<{ body: string; at: number }> }
  | { type: "offered"; answers: Offered[]; startedAt: number; ms: number }
  | { type: "error"; message: string };

const bridges: Bridge[] = [];
const providers: DemoOrigin[] = [];

async function start(redisUrls: string[], token: string): Promise<HelperReply> {
  for (const redisUrl of redisUrls) bridges.push(await startBridge({ redisUrl, token }));
  for (let i = 0; i < 2; i++) providers.push(await startOrigin());
  return { type: "ready", bridges: bridges.map((b) => b.url), providers: providers.map((p) => p.url) };
}

async function stop(): Promise<never> {
  await Promise.allSettled([...bridges, ...providers].map((s) => s.close()));
  process.exit(0);
}

/**
 * POSTs message i to `targets[i % targets.length]`, `concurrency` at a time, each sent as soon as
 * one is answered; the answers in message order, and when the first left (ms since epoch).
 */
async function offer(m: Extract<HelperRequest, { type: "offer" }>): Promise<HelperReply> {
  const answers = new Array<Offered>(m.messages);
  let next = 0;
  const loop = async () => {
    while (next < m.messages) {
      const i = next++;
      const res = await fetch(`${m.targets[i % m.targets.length]}${m.path}`, {
        method: "POST",
        body: messageBody(i),
        headers: { "content-type": "text/plain", "CF-Connecting-IP": `198.18.${(i >> 8) & 255}.${i & 255}` },
      });
      await res.arrayBuffer();
      answers[i] = { status: res.status, decision: res.headers.get("Sluice-Decision") ?? "" };
    }
  };
  const startedAt = Date.now();
  await Promise.all(Array.from({ length: Math.min(m.concurrency, m.messages) }, loop));
  return { type: "offered", answers, startedAt, ms: Date.now() - startedAt };
}

async function answer(m: HelperRequest): Promise<HelperReply> {
  if (m.type === "start") return start(m.redisUrls, m.token);
  if (m.type === "offer") return offer(m);
  if (m.type === "stop") return stop();
  const seen = providers[m.provider]?.seen ?? [];
  return { type: "arrivals", list: seen.filter((s) => s.path === m.path).map((s) => ({ body: s.body, at: s.at })) };
}

process.on("message", (m: HelperRequest) => {
  answer(m).then(
    (reply) => process.send?.(reply),
    (e: unknown) => process.send?.({ type: "error", message: e instanceof Error ? e.message : String(e) }),
  );
});
// the driver gone (crashed, killed): nothing left to serve
process.on("disconnect", () => void stop());
