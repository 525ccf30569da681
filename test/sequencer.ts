import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The slowest files, slowest first (each file's time in a full run, `vitest run --reporter=json`).
 * Vitest orders a run by the timings it cached from the last one; a clean clone (CI) has none, and
 * falls back to the largest file first, which started the slowest file of all (git-install, a
 * small file) among the last, alone on one fork for its last minute. Listed, these start first and
 * the short files fill in around them. A file missing from the list only starts later, so the list
 * need not be exact; one renamed or gone is ignored.
 */
export const SLOW_FILES = [
  "test/package/git-install.test.ts",
  "test/integration/leases-worker.test.ts",
  "test/integration/adaptive-worker.test.ts",
  "test/integration/edge-store.test.ts",
  "test/security/claim-lifetime.test.ts",
  "test/security/audit-trail.test.ts",
  "test/integration/priorities-lua.test.ts",
  "test/security/adaptive-collapse.test.ts",
  "test/integration/local-mode.test.ts",
  "test/security/lost-completion.test.ts",
  "test/integration/algorithms-lua.test.ts",
  "test/integration/clock-lua.test.ts",
  "test/integration/idempotency-worker.test.ts",
  "test/integration/shedding-worker.test.ts",
  "test/integration/decide-lua.test.ts",
  "test/integration/queue-bounds.test.ts",
  "test/security/session-lock-lifetime.test.ts",
  "test/security/dashboard-session.test.ts",
  "dev/check.test.ts",
  "test/security/principal-keyset.test.ts",
  "test/integration/agent-incident.test.ts",
  "test/integration/sessions.test.ts",
  "test/security/queued-identity.test.ts",
  "test/integration/regions.test.ts",
  "test/package/package.test.ts",
];

/** The listed files first, in the list's order; the others after them, as vitest orders them. */
export class SlowFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rest = await super.sort(files);
    const rank = (spec: TestSpecification) => {
      const at = SLOW_FILES.indexOf(relative(spec.project.config.root, spec.moduleId).replaceAll("\\", "/"));
      return at === -1 ? SLOW_FILES.length : at;
    };
    // a stable sort: the unlisted files keep vitest's order
    return rest.sort((a, b) => rank(a) - rank(b));
  }
}
