// `npm run dev [-- --config file]`: the whole local stack in one process tree.
//   redis-server (free port; or REDIS_URL; or a real Upstash via UPSTASH_REDIS_REST_URL/TOKEN)
//   -> the Upstash-REST bridge -> the demo origin (unless ORIGIN_URL) -> wrangler dev on PORT.
// Ctrl-C or SIGTERM stops every child.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import type { ScriptTime } from "./bridge.js";
import { devBridgePort, devVarsLines, startDevBridge } from "./dev-bridge.js";
import { startOrigin } from "./origin.js";
import { freePort } from "./ports.js";
import { REDIS_MISSING, redisServerAvailable, startRedis } from "./redis-process.js";
import { checkWranglerConfig, configPathFromArgs } from "./wrangler-config.js";
import { redact } from "../src/util/log.js";

const stops: Array<() => Promise<void> | void> = [];
let stopping = false;

async function stopAll(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    for (const stop of stops.reverse()) await Promise.resolve(stop()).catch(() => undefined);
  }
  process.exit(code);
}
process.on("SIGINT", () => void stopAll(0));
process.on("SIGTERM", () => void stopAll(0));

// `npm run dev` does not always pass SIGTERM on to its script (it may exit first): watch the
// processes above us (tsx, npm) and stop everything when one of them is gone.
const ancestors = ancestorsOf(process.pid, 2);
setInterval(() => {
  if (ancestors.some((pid) => !alive(pid))) void stopAll(0);
}, 1_000).unref();

function ancestorsOf(pid: number, depth: number): number[] {
  const out: number[] = [];
  for (let p = pid; out.length < depth;) {
    const r = spawnSync("ps", ["-o", "ppid=", "-p", String(p)], { encoding: "utf8" });
    const parent = Number(r.stdout.trim());
    if (!parent || parent <= 1) break;
    out.push(parent);
    p = parent;
  }
  return out;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** SLUICE_BRIDGE_DELAY_MS: the bridge's added round-trip time, to play a Redis that is far away. */
function bridgeDelayMs(): number {
  const text = process.env.SLUICE_BRIDGE_DELAY_MS;
  if (text === undefined || text === "") return 0;
  const ms = Number(text);
  if (!Number.isInteger(ms) || ms < 0) {
    console.error(`SLUICE_BRIDGE_DELAY_MS must be a whole number of milliseconds, got ${text}`);
    process.exit(2);
  }
  return ms;
}

/**
 * SLUICE_BRIDGE_SCRIPT_TIME=refuse: the bridge refuses TIME inside scripts as ElastiCache Serverless
 * does, so the Worker's stores fall back to the isolate's clock (docs/deploy.md).
 */
function bridgeScriptTime(): ScriptTime {
  const text = process.env.SLUICE_BRIDGE_SCRIPT_TIME;
  if (text === undefined || text === "" || text === "allow") return "allow";
  if (text === "refuse") return "refuse";
  console.error(`SLUICE_BRIDGE_SCRIPT_TIME must be "allow" or "refuse", got ${text}`);
  return process.exit(2);
}

async function main(): Promise<void> {
  const configPath = configPathFromArgs(process.argv.slice(2));
  const port = Number(process.env.PORT ?? 8787);
  const vars: Record<string, string> = { ...(await redisVars()), ORIGIN_URL: await originUrl() };

  const checked = checkWranglerConfig(configPath, { ORIGIN_URL: vars.ORIGIN_URL });
  // a bad option is printed, not fatal: wrangler dev watches the file, and until it is fixed the
  // Worker answers each request with the same error as a 500 problem naming the field
  if (!checked.ok) {
    console.error(`${configPath}: invalid sluice configuration: ${checked.error.message}`);
    console.error(`${configPath}: starting anyway; requests answer 500 until it is fixed (saving the file reloads)`);
  } else for (const warning of checked.warnings) console.warn(`${configPath}: warning: ${warning.message}`);

  // an admin token for the dashboard and the admin API (yours from SLUICE_ADMIN_TOKEN, else a fresh one)
  vars.SLUICE_ADMIN_TOKEN = process.env.SLUICE_ADMIN_TOKEN ?? randomBytes(12).toString("hex");
  startWrangler(configPath, port, vars);
  console.log(
    `sluice  http://127.0.0.1:${port} (wrangler dev, config ${configPath}); try: curl -i http://127.0.0.1:${port}/api/products/1`,
  );
  console.log(`admin   http://127.0.0.1:${port}/__sluice/ (dashboard; token ${vars.SLUICE_ADMIN_TOKEN})`);
}

/** The Worker's Redis: a real Upstash database if one is named, else the bridge in front of a local Redis. */
async function redisVars(): Promise<Record<string, string>> {
  if (process.env.UPSTASH_REDIS_REST_URL) {
    // a URL may carry a password (the rediss:// form): never printed
    console.log(`redis   ${redact(process.env.UPSTASH_REDIS_REST_URL)} (Upstash, from UPSTASH_REDIS_REST_URL)`);
    return {
      UPSTASH_REDIS_REST_URL: process.env.UPSTASH_REDIS_REST_URL,
      UPSTASH_REDIS_REST_TOKEN: process.env.UPSTASH_REDIS_REST_TOKEN ?? "",
    };
  }
  let redisUrl = process.env.REDIS_URL;
  if (!redisUrl) {
    if (!redisServerAvailable()) {
      console.error(REDIS_MISSING);
      process.exit(1);
    }
    const redis = await startRedis();
    stops.push(() => redis.stop());
    redisUrl = redis.url;
  }
  const scriptTime = bridgeScriptTime();
  // the same port and token on every start, so an app's .dev.vars keeps working (dev/dev-bridge.ts)
  const started = await startDevBridge({ redisUrl, port: devBridgePort(), latencyMs: bridgeDelayMs(), scriptTime });
  const { bridge, token } = started;
  stops.push(() => bridge.close());
  console.log(`redis   ${redact(redisUrl)}${process.env.REDIS_URL ? " (REDIS_URL)" : " (spawned)"}`);
  console.log(
    `bridge  ${bridge.url} (Upstash REST, token ${token}, ${bridge.fault.latencyMs} ms added per round trip${scriptTime === "refuse" ? ", TIME refused in scripts" : ""})`,
  );
  if (bridge.port !== started.preferred)
    console.warn(
      `        port ${started.preferred} was taken: the bridge is on ${bridge.port} this time (SLUICE_BRIDGE_PORT picks another)`,
    );
  console.log(`        an app of your own reaches it with these lines in its .dev.vars (the same on every start):`);
  for (const line of devVarsLines(bridge.url, token)) console.log(`          ${line}`);
  console.log(
    `        place Redis far away, hang or refuse it: curl -X POST -H 'authorization: Bearer ${token}' -d '{"ms":80}' ${bridge.url}/__bridge/delay  ({"mode":"hang"|"refuse"|"normal"})`,
  );
  console.log(
    `        refuse TIME in scripts (ElastiCache Serverless): same with -d '{"time":"refuse"}' ${bridge.url}/__bridge/script-time  ("allow" undoes it)`,
  );
  return { UPSTASH_REDIS_REST_URL: bridge.url, UPSTASH_REDIS_REST_TOKEN: token };
}

/** ORIGIN_URL if set, else the demo origin, started here. */
async function originUrl(): Promise<string> {
  if (process.env.ORIGIN_URL) {
    console.log(`origin  ${process.env.ORIGIN_URL} (ORIGIN_URL)`);
    return process.env.ORIGIN_URL;
  }
  const origin = await startOrigin({ port: await freePort() });
  stops.push(() => origin.close());
  console.log(`origin  ${origin.url} (demo)`);
  return origin.url;
}

/** `wrangler dev` in a process group of its own, stopped with everything else and stopping it all when it exits. */
function startWrangler(configPath: string, port: number, vars: Record<string, string>): void {
  const args = [
    "wrangler",
    "dev",
    "--config",
    configPath,
    "--port",
    String(port),
    "--ip",
    "127.0.0.1",
    "--show-interactive-dev-session=false",
  ];
  for (const [k, v] of Object.entries(vars)) args.push("--var", `${k}:${v}`);
  const wrangler: ChildProcess = spawn("npx", args, {
    stdio: ["ignore", "inherit", "inherit"],
    detached: true,
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
  });
  stops.push(
    () =>
      new Promise<void>((resolve) => {
        if (wrangler.exitCode !== null || !wrangler.pid) return resolve();
        wrangler.once("exit", () => resolve());
        process.kill(-wrangler.pid, "SIGTERM"); // the whole group: npx, wrangler and workerd
        setTimeout(() => wrangler.pid && process.kill(-wrangler.pid, "SIGKILL"), 3_000).unref();
      }),
  );
  wrangler.once("exit", (code) => void stopAll(code ?? 0));
}

main().catch(async (e: unknown) => {
  console.error((e as Error).message);
  await stopAll(1);
});
