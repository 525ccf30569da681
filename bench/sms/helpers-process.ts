/**
 * Section 13's servers in a process of their own: the two bridges (one per region's Redis) and the
 * two providers (straight and through sluice). In the driver's process they would share its one
 * event loop with the 2,000 requests it offers, and the gateway could take the burst in no faster
 * than that loop answers (slower than the limit on 2 cores, so the queue would hardly be used), and
 * each arrival's time would wait behind the driver's work. Started by `fork` (the driver's tsx
 * loader comes along in execArgv); it talks over the IPC channel, see {@link HelperRequest}.
 */
import { type Bridge, type DemoOrigin, startBridge, startOrigin } from "@sluice/dev";

/** What the driver asks. */
export type HelperRequest =
  | { type: "start"; redisUrls: string[]; token: string }
  | { type: "arrivals"; provider: number; path: string }
  | { type: "stop" };

/** What the helper answers. */
export type HelperReply =
  | { type: "ready"; bridges: string[]; providers: string[] }
  | { type: "arrivals"; list: Array<{ body: string; at: number }> }
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

async function answer(m: HelperRequest): Promise<HelperReply> {
  if (m.type === "start") return start(m.redisUrls, m.token);
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
