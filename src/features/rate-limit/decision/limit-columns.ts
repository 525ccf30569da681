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
  "override_all",
  "override_own",
  "lease_ask",
  "lease_epoch",
  "lease_granted",
  "lease_left",
  "floor",
  "window",
  // each algorithm's own, one meaning each (the contract says which algorithm reads which)
  "warmup_us",
  "max_delay_us",
  "nodelay",
  "slot_id",
  "entry_id",
  "margin_us",
  // "settle" mode's
  "delta",
] as const;

export type DecideLimitColumn = (typeof DECIDE_LIMIT_COLUMNS)[number];

/** One limit's ARGV for decide.lua, column by column: a column left out (or misnamed) does not compile. */
export type DecideLimitArgs = Readonly<Record<DecideLimitColumn, string | number>>;

/**
 * The columns only one algorithm reads (its settings, the request's id in its bucket), and what a
 * limit of any other algorithm sends there: the script reads none of them for it. An algorithm's
 * entry (algorithms/registry.ts `columns`) gives its own.
 */
export const ALGORITHM_COLUMNS = {
  warmup_us: 0,
  max_delay_us: 0,
  nodelay: 0,
  slot_id: "",
  entry_id: "",
  margin_us: 0,
} as const satisfies Partial<DecideLimitArgs>;

export type AlgorithmColumn = keyof typeof ALGORITHM_COLUMNS;

/** An algorithm's own columns for one limit and call; those it leaves out are sent as ALGORITHM_COLUMNS has them. */
export type AlgorithmColumns = Readonly<Partial<Record<AlgorithmColumn, string | number>>>;

/** A limit's columns in the order decide.lua reads them. */
export function limitArgv(args: DecideLimitArgs): Array<string | number> {
  return DECIDE_LIMIT_COLUMNS.map((column) => args[column]);
}
