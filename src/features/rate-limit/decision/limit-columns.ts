// In a module of its own, without the script's text: the tests and the bench import it under plain Node.
/**
 * The ARGV columns lua/decide.lua reads for each limit, in their order (the contract atop the
 * script says what each holds). Named here once for the TypeScript that writes them, and in the
 * script's `COLUMNS` table, which reads them by name: a unit test (./limit-columns.test.ts)
 * holds the two lists equal, name for name and in order.
 */
export const DECIDE_LIMIT_COLUMNS = [
  "algo",
  "rate",
  "period_us",
  "burst",
  "cost",
  "shadow",
  "share_idx",
  "demand_idx",
  "p1",
  "p2",
  "override_all",
  "override_own",
  "lease_ask",
  "lease_epoch",
  "lease_granted",
  "lease_left",
  "floor",
  "window",
] as const;

export type DecideLimitColumn = (typeof DECIDE_LIMIT_COLUMNS)[number];

/** One limit's ARGV for decide.lua, column by column: a column left out (or misnamed) does not compile. */
export type DecideLimitArgs = Readonly<Record<DecideLimitColumn, string | number>>;

/** A limit's columns in the order decide.lua reads them. */
export function limitArgv(args: DecideLimitArgs): Array<string | number> {
  return DECIDE_LIMIT_COLUMNS.map((column) => args[column]);
}
