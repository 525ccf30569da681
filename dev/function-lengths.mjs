// Lists the functions longer than the project's limit ("no function over about 40 lines without a
// reason") in the product (src/) and in the tools' workspaces (dev/, bench/), which keep the same
// house rules, and fails when there is one: run by `npm run lint`. Tests are not counted.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";

const LIMIT = 45;
const ROOTS = ["src", "dev", "bench"];

function sources(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === "node_modules" ? [] : sources(path);
    return /\.(tsx?|mjs)$/.test(path) && !path.endsWith(".test.ts") ? [path] : [];
  });
}

const long = [];
for (const file of ROOTS.flatMap(sources)) {
  const sf = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
  const visit = (node) => {
    if (ts.isFunctionLike(node) && "body" in node && node.body) {
      const from = sf.getLineAndCharacterOfPosition(node.getStart()).line;
      const to = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
      const name = node.name?.getText() ?? node.parent?.name?.getText?.() ?? "<anonymous>";
      if (to - from + 1 > LIMIT) long.push(`${file}:${from + 1} ${name}: ${to - from + 1} lines`);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
}
if (long.length > 0) {
  console.error(`functions over ${LIMIT} lines:\n${long.join("\n")}`);
  process.exit(1);
}
