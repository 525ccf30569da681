/**
 * The Upstash-REST bridge on its own:
 *   tsx dev/bridge-main.ts --redis redis://127.0.0.1:PORT --token T [--port N] [--latency MS] [--script-time refuse]
 * `--latency` defaults to SLUICE_BRIDGE_DELAY_MS and `--script-time` to SLUICE_BRIDGE_SCRIPT_TIME (as
 * in `npm run dev`); `POST /__bridge/delay` changes the latency, or hangs or refuses Redis, and
 * `POST /__bridge/script-time` refuses or allows TIME in scripts, while the bridge runs (see
 * docs/getting-started.md, "The local stack").
 */
import { parseArgs } from "node:util";
import { startBridge } from "./bridge.js";

function usage(message: string): never {
  console.error(
    `${message}\nusage: tsx dev/bridge-main.ts --redis redis://127.0.0.1:PORT --token T [--port N] [--latency MS] [--script-time allow|refuse]`,
  );
  process.exit(2);
}

function nonNegativeInt(name: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0) usage(`--${name} must be a non-negative integer, got ${text}`);
  return value;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      redis: { type: "string" },
      token: { type: "string" },
      port: { type: "string" },
      latency: { type: "string" },
      "script-time": { type: "string" },
    },
  });
  if (values.redis === undefined) usage("--redis is required");
  if (values.token === undefined || values.token === "") usage("--token is required");
  const scriptTime = values["script-time"] ?? process.env.SLUICE_BRIDGE_SCRIPT_TIME ?? "allow";
  if (scriptTime !== "allow" && scriptTime !== "refuse")
    usage(`--script-time must be allow or refuse, got ${scriptTime}`);
  const bridge = await startBridge({
    redisUrl: values.redis,
    token: values.token,
    port: nonNegativeInt("port", values.port),
    latencyMs: nonNegativeInt("latency", values.latency ?? process.env.SLUICE_BRIDGE_DELAY_MS),
    scriptTime,
  });
  console.log(
    `bridge listening on ${bridge.url} (latency ${bridge.fault.latencyMs} ms; TIME in scripts: ${scriptTime}; switch: POST ${bridge.url}/__bridge/delay, ${bridge.url}/__bridge/script-time)`,
  );
  const stop = () => void bridge.close().then(() => process.exit(0));
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : String(error));
  process.exit(1);
});
