/**
 * The README ships in the npm package, which holds no docs/: its links must work from the
 * registry's page and from node_modules/sluice/README.md, so each is absolute (the repository's
 * copy of the manual) or an anchor of the README itself; and each that points into the repository
 * names a file or folder this checkout has.
 */
import { existsSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const pkg = JSON.parse(readFileSync("package.json", "utf8")) as { repository: { url: string } };
/** "git+https://github.com/sluice-dev/sluice.git" → "https://github.com/sluice-dev/sluice" */
const repository = pkg.repository.url.replace(/^git\+/, "").replace(/\.git$/, "");
const links = [...readFileSync("README.md", "utf8").matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1] ?? "");

describe("the README's links", () => {
  it("are absolute or anchors of the README itself", () => {
    expect(links.length).toBeGreaterThan(20);
    expect(links.filter((l) => !/^(https?:\/\/|#)/.test(l))).toEqual([]);
  });

  it("into the repository name what this checkout has, on its main branch", () => {
    const inRepo = links.filter((l) => l.startsWith(`${repository}/`));
    expect(inRepo.length).toBeGreaterThan(20);
    const wrong = inRepo.filter((l) => {
      const at = /^\/(blob|tree)\/main\/([^#]*)/.exec(l.slice(repository.length));
      return !at || !existsSync(at[2] === "" ? "." : (at[2] as string));
    });
    expect(wrong).toEqual([]);
  });
});
