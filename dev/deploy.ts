// `npm run deploy [-- <wrangler deploy's options>]`: `npm run check` on the configuration being
// deployed first, then `wrangler deploy` with the same options. An invalid configuration stops the
// deploy (exit 1, nothing uploaded): deployed, it would answer every request with a 500. Warnings
// are printed and do not stop it.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { configPathFromArgs } from "./wrangler-config.js";

const args = process.argv.slice(2);
const config = configPathFromArgs(args);
const check = spawnSync(
  process.execPath,
  ["--import", "tsx", fileURLToPath(new URL("./check.ts", import.meta.url)), "--config", config],
  { stdio: "inherit" },
);
if (check.status !== 0) {
  console.error(
    `${config}: not deployed: fix the configuration (npm run check -- --config ${config}) and deploy again`,
  );
  process.exit(check.status ?? 1);
}
const deploy = spawnSync("npx", ["wrangler", "deploy", ...args], { stdio: "inherit" });
process.exit(deploy.status ?? 1);
