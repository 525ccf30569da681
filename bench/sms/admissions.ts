/**
 * What the limit itself admitted, on Redis's clock: the sliding log is a sorted set of one member
 * per admitted request, scored with its admission time (µs, Redis TIME) and trimmed to the last
 * period by each take. Read every 200 ms (well inside the 1 s a member lives), the union of the
 * reads is every admission of the run, so the worst second the limit let through can be told
 * apart from the worst second the provider saw (which adds the varying delay from decision to
 * arrival).
 */
import { replyToJs, RespClient } from "@sluice/dev";
import type { Cleanup } from "../stack.js";

const POLL_MS = 200;

export interface AdmissionWatch {
  /** Stops reading; the admission times seen, ms (Redis's clock). */
  stop(): Promise<number[]>;
}

/** Watches the sorted sets under `prefix` in the Redis at `url` until stopped. */
export function watchAdmissions(cleanup: Cleanup, url: string, prefix: string): AdmissionWatch {
  const resp = RespClient.fromUrl(url, { timeoutMs: 5_000 });
  cleanup.add("RESP client (section 13's admissions)", () => resp.close());
  const seen = new Map<string, number>();
  const logs = new Set<string>();
  let running = true;
  const read = async () => {
    if (logs.size === 0) await findLogs(resp, prefix, logs);
    for (const key of logs) {
      const flat = replyToJs(await resp.send(["ZRANGE", key, "0", "-1", "WITHSCORES"]));
      if (!Array.isArray(flat)) continue;
      // the running sum beside the members ("#sum", scored by minus the sum) is no admission
      for (let i = 0; i + 1 < flat.length; i += 2)
        if (Number(flat[i + 1]) > 0) seen.set(`${key} ${String(flat[i])}`, Number(flat[i + 1]) / 1000);
    }
  };
  const loop = (async () => {
    while (running) {
      await read();
      await new Promise((done) => setTimeout(done, POLL_MS));
    }
    await read();
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      resp.close();
      return [...seen.values()];
    },
  };
}

/** The sorted sets (sliding logs) among the keys under `prefix`. */
async function findLogs(resp: RespClient, prefix: string, into: Set<string>): Promise<void> {
  let cursor = "0";
  do {
    const reply = replyToJs(await resp.send(["SCAN", cursor, "MATCH", `${prefix}:*`, "COUNT", "1000"]));
    if (!Array.isArray(reply)) return;
    cursor = String(reply[0]);
    for (const key of (reply[1] as unknown[]) ?? []) {
      const type = replyToJs(await resp.send(["TYPE", String(key)]));
      if (type === "zset") into.add(String(key));
    }
  } while (cursor !== "0");
}
