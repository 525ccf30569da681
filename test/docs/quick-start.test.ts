/**
 * The quick start shows what it promises: the README's loop of curls, exactly as written (parsed
 * from README.md and docs/getting-started.md, so an edit to either that breaks the promise fails
 * here), run with bash and curl against the Worker in workerd configured with the root
 * wrangler.toml's `[vars.SLUICE]` (what `npm run dev` serves), prints the sequence the comment
 * under it prints; then its `curl -i` answers the 429 of the README's `http` example.
 *
 * No speed is assumed: the demo route's limit is 10 per minute as an exact sliding log, so no
 * request is admitted again before the first is a minute old, longer than this test may run.
 */
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { parse } from "smol-toml";
import { beforeAll, describe, expect, it } from "vitest";
import type { SluiceInput } from "../../src/config/schema.js";
import { useStack } from "../integration/stack.js";
import { fencesOf } from "./markdown.js";

/** Where the quick start's commands send their requests: `npm run dev`'s Worker. */
const DEV_URL = "http://127.0.0.1:8787";

const demo = parse(readFileSync("wrangler.toml", "utf8")) as { vars: { SLUICE: SluiceInput } };

/** The loop (a `for` line of curls), the status codes its comment says it prints, and the `curl -i` after it. */
interface QuickStart {
  file: string;
  loop: string;
  printed: string;
  inspect: string;
}

function quickStartOf(file: string): QuickStart {
  for (const fence of fencesOf(file).filter((f) => f.lang === "sh")) {
    const lines = fence.code.split("\n");
    const at = lines.findIndex((l) => l.startsWith("for ") && l.includes("curl "));
    if (at < 0) continue;
    const printed = /^#\s+((?:\d{3}\s)+)/.exec(lines[at + 1] ?? "")?.[1]?.trim();
    const inspect = lines.slice(at + 2).find((l) => l.startsWith("curl -i "));
    if (!printed || !inspect)
      throw new Error(`${file}:${fence.line}: the loop needs "# <codes>" under it, then a curl -i`);
    return { file, loop: lines[at] as string, printed, inspect };
  }
  throw new Error(`${file}: no quick-start loop (a sh fence with a \`for ... curl\` line)`);
}

/** The README's 429 example: status line, headers (lower-cased names) and the JSON body. */
function exampleRefusal(): { status: string; headers: Map<string, string>; body: Record<string, unknown> } {
  const fence = fencesOf("README.md").find((f) => f.lang === "http" && f.code.includes(" 429 "));
  if (!fence) throw new Error("README.md: no http example of a 429");
  return parseHttp(fence.code);
}

function parseHttp(text: string) {
  const [head = "", ...rest] = text.replace(/\r/g, "").split("\n\n");
  const [status = "", ...fields] = head.split("\n");
  const headers = new Map(
    fields.map((f) => [f.slice(0, f.indexOf(":")).trim().toLowerCase(), f.slice(f.indexOf(":") + 1).trim()] as const),
  );
  return { status: status.trim(), headers, body: JSON.parse(rest.join("\n\n")) as Record<string, unknown> };
}

/** Runs a command line with bash, as a reader pastes it, and gives what it printed. */
function sh(line: string): Promise<string> {
  return new Promise((done, fail) => {
    const child = spawn("bash", ["-c", line], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr.on("data", (c: Buffer) => (err += c.toString()));
    child.on("error", fail);
    child.on("close", (code) => (code === 0 ? done(out) : fail(new Error(`${line}: exit ${code}: ${err}`))));
  });
}

/**
 * The example's figures that depend on when one asks (`retry-after`, `retry-after-ms`, `ratelimit`'s `t`, the
 * detail's "retry in N ms", `retry_after_ms`): any whole number stands where the example has one.
 * Everything else (status, content type, policy, decision, region, the problem's other fields) is exact.
 */
const WHEN = new Set(["retry-after", "retry-after-ms", "ratelimit", "retry_after_ms"]);
const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const anyNumber = (example: string) => new RegExp(`^${escaped(example).replace(/\d+/g, "\\d+")}$`);
const anyWait = (detail: string) => new RegExp(`^${escaped(detail).replace(/retry in \d+ ms/, "retry in \\d+ ms")}$`);

describe("the quick start", () => {
  const rig = useStack({ sluice: demo.vars.SLUICE, listen: true, queues: true });
  const quick = quickStartOf("README.md");
  let url = "";
  beforeAll(async () => {
    url = (await rig.mf.ready).origin;
  });

  it("is the same in docs/getting-started.md", () => {
    expect({ ...quickStartOf("docs/getting-started.md"), file: "README.md" }).toEqual(quick);
  });

  it("prints what the loop's comment says, then answers the README's 429", async () => {
    expect(quick.loop).toContain(DEV_URL);
    const printed = await sh(quick.loop.replaceAll(DEV_URL, url));
    expect(printed.trim()).toBe(quick.printed);

    const example = exampleRefusal();
    const raw = await sh(quick.inspect.replaceAll(DEV_URL, url));
    const answer = parseHttp(raw);
    expect(answer.status).toBe(example.status);
    for (const [name, value] of example.headers) {
      const got = `${name}: ${answer.headers.get(name)}`;
      if (WHEN.has(name)) expect(got).toMatch(anyNumber(`${name}: ${value}`));
      else expect(got).toBe(`${name}: ${value}`);
    }
    for (const [field, value] of Object.entries(example.body)) {
      const got = answer.body[field];
      if (WHEN.has(field)) expect(typeof got, field).toBe(typeof value);
      else if (field === "detail") expect(got).toMatch(anyWait(String(value)));
      else expect(got, field).toEqual(value);
    }
  });
});
