/**
 * Lets this Node process import `lua/*.lua` as text, as wrangler's Text module rule does in the
 * Worker and the `lua-text` plugin does under vitest. The bench needs it to use the Worker's own
 * code that imports decide.lua (`scriptCall` in src/features/rate-limit/decision/decision.ts); tsx alone refuses `.lua`
 * with ERR_UNKNOWN_FILE_EXTENSION. Only a dynamic import after `allowLuaText()` sees the hook:
 * a static import is loaded before any of the importing module's code runs.
 */
import { register } from "node:module";

const HOOK = `
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
export async function load(url, context, nextLoad) {
  if (url.startsWith("file:") && url.endsWith(".lua")) {
    const text = await readFile(fileURLToPath(url), "utf8");
    return { format: "module", source: "export default " + JSON.stringify(text) + ";", shortCircuit: true };
  }
  return nextLoad(url, context);
}
`;

let registered = false;

export function allowLuaText(): void {
  if (registered) return;
  register(`data:text/javascript,${encodeURIComponent(HOOK)}`);
  registered = true;
}

/** src/features/rate-limit/decision/decision.ts (which imports lua/decide.lua through script-call.ts), loaded with the hook in place. */
export async function importDecide(): Promise<typeof import("../src/features/rate-limit/decision/decision.js")> {
  allowLuaText();
  return import("../src/features/rate-limit/decision/decision.js");
}
