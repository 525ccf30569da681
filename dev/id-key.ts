/**
 * What `npm run check` can tell about the ids sluice shows of clients (the ledger, the logs, the
 * dashboard): keyed with `SLUICE_ID_KEY`, else with `SLUICE_ADMIN_TOKEN` (src/identity/pseudonym.ts);
 * with neither, plain SHA-256 hashes, which give an IP back to anybody who tries the addresses of a
 * /8 (seconds on one core). Like the region check, it sees `[vars]` and `.dev.vars` only.
 */

/** The note on the ids of a deployment whose visible variables are `variables`; none when a key is there. */
export function idKeyWarnings(variables: ReadonlySet<string>): string[] {
  if (variables.has("SLUICE_ID_KEY") || variables.has("SLUICE_ADMIN_TOKEN")) return [];
  return [
    "neither SLUICE_ID_KEY nor SLUICE_ADMIN_TOKEN is set (in [vars] or .dev.vars): the ids of clients in the ledger " +
      "and the logs are plain SHA-256 hashes of their identifiers, pseudonyms only (an IP is found again by hashing " +
      "the addresses it may be). Set SLUICE_ID_KEY (`wrangler secret put SLUICE_ID_KEY`) to key them. " +
      "If you set it with `wrangler secret put`, this check cannot see it: ignore this.",
  ];
}
