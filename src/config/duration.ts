const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * Parses a duration such as `"500ms"`, `"1s"`, `"15m"`, `"1h"` or `"1d"` into milliseconds.
 * Returns `undefined` for anything else, so the schema can name the field.
 *
 * @example parseDuration("1m") // 60000
 */
export function parseDuration(text: string): number | undefined {
  const m = /^(\d{1,9})(ms|s|m|h|d)$/.exec(text.trim());
  if (!m) return undefined;
  const ms = Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
  return ms > 0 ? ms : undefined;
}
