// An ESLint rule that forbids import cycles between the project's own files, counting
// `import type` and `export type ... from` too: import-x/no-cycle skips type-only imports (they
// are erased at build), but a circle of types is still a circle of meaning, and it is where the
// next value import closes a real one. Relative specifiers only ("./x.js" names x.ts or x.tsx).
import { existsSync, readFileSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";
import ts from "typescript";

const importsOf = new Map();

function resolveSpecifier(from, specifier) {
  if (!specifier.startsWith(".")) return undefined;
  const base = resolve(dirname(from), specifier).replace(/\.(m?js|jsx)$/, "");
  const candidates = [`${base}.ts`, `${base}.tsx`, `${base}/index.ts`, base];
  return candidates.find((path) => /\.tsx?$/.test(path) && existsSync(path));
}

/** The project files that `file` imports (values and types alike), read once per lint run. */
function localImports(file) {
  let found = importsOf.get(file);
  if (found === undefined) {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, "utf8"), true, false);
    found = importedFiles.flatMap((entry) => {
      const target = resolveSpecifier(file, entry.fileName);
      return target === undefined ? [] : [{ target, specifier: entry.fileName }];
    });
    importsOf.set(file, found);
  }
  return found;
}

/** A path of files from `start` back to `file`, or undefined when none leads back. */
function pathBack(start, file) {
  const previous = new Map([[start, undefined]]);
  const queue = [start];
  while (queue.length > 0) {
    const current = queue.shift();
    for (const { target } of localImports(current)) {
      if (target === file) {
        const route = [];
        for (let at = current; at !== undefined; at = previous.get(at)) route.unshift(at);
        return route;
      }
      if (!previous.has(target)) {
        previous.set(target, current);
        queue.push(target);
      }
    }
  }
  return undefined;
}

const noImportCycle = {
  meta: {
    type: "problem",
    docs: { description: "Forbid import cycles between project files, type-only imports included." },
    schema: [],
    messages: { cycle: "Import cycle (type-only imports counted): {{route}}" },
  },
  create(context) {
    const file = context.physicalFilename;
    const check = (node) => {
      if (node.source == null || typeof node.source.value !== "string") return;
      const target = resolveSpecifier(file, node.source.value);
      if (target === undefined) return;
      const route = pathBack(target, file);
      if (route === undefined) return;
      const names = [file, ...route, file].map((path) => relative(process.cwd(), path));
      context.report({ node, messageId: "cycle", data: { route: names.join(" -> ") } });
    };
    return { ImportDeclaration: check, ExportNamedDeclaration: check, ExportAllDeclaration: check };
  },
};

export default { rules: { "no-import-cycle": noImportCycle } };
