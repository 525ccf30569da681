/**
 * The bridge `npm run dev` starts, at an address and token that stay the same from one start to
 * the next, so an app of your own can keep them in its `.dev.vars`: a fixed port (8789, or
 * SLUICE_BRIDGE_PORT; a free one only when that one is taken, and then it says so), and a token
 * made once and kept in `.wrangler/sluice-dev/bridge-token` (ignored by git, readable by you alone).
 */
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startBridge, type Bridge, type BridgeOptions } from "./bridge.js";

/** The bridge's port when SLUICE_BRIDGE_PORT does not say: beside wrangler dev's 8787. */
export const DEV_BRIDGE_PORT = 8789;

/** Where the token is kept between starts, under the project's (git-ignored) `.wrangler/`. */
export const DEV_STATE_DIR = join(".wrangler", "sluice-dev");

/**
 * The dev bridge's token: the one kept in `dir`, else a new one, kept there (mode 0600).
 *
 * @example devBridgeToken() // "3f9c…" (the same on the next start)
 */
export function devBridgeToken(dir = DEV_STATE_DIR): string {
  const file = join(dir, "bridge-token");
  const kept = existsSync(file) ? readFileSync(file, "utf8").trim() : "";
  if (/^[0-9a-f]{32}$/.test(kept)) return kept;
  const token = randomBytes(16).toString("hex");
  mkdirSync(dir, { recursive: true });
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return token;
}

/** What `startDevBridge` started: the bridge, and whether it is on the port asked for. */
export interface DevBridge {
  bridge: Bridge;
  token: string;
  /** The port asked for; `bridge.port` differs when it was taken. */
  preferred: number;
}

/**
 * Starts the bridge on `port` with the kept token; on a free port when `port` is taken (another
 * `npm run dev`, another program).
 */
export async function startDevBridge(
  opts: Omit<BridgeOptions, "port" | "token"> & { port?: number; stateDir?: string },
): Promise<DevBridge> {
  const { port: preferred = DEV_BRIDGE_PORT, stateDir, ...rest } = opts;
  const token = devBridgeToken(stateDir);
  try {
    return { bridge: await startBridge({ ...rest, token, port: preferred }), token, preferred };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EADDRINUSE") throw e;
    return { bridge: await startBridge({ ...rest, token }), token, preferred };
  }
}

/** SLUICE_BRIDGE_PORT, checked: a port number, else the default. */
export function devBridgePort(text = process.env.SLUICE_BRIDGE_PORT): number {
  if (text === undefined || text === "") return DEV_BRIDGE_PORT;
  const port = Number(text);
  if (!Number.isInteger(port) || port < 1 || port > 65_535)
    throw new Error(`SLUICE_BRIDGE_PORT must be a port number (1-65535), got ${text}`);
  return port;
}

/** The lines an app's `.dev.vars` needs to reach the dev bridge, ready to paste. */
export function devVarsLines(url: string, token: string): string[] {
  return [`UPSTASH_REDIS_REST_URL=${url}`, `UPSTASH_REDIS_REST_TOKEN=${token}`];
}
