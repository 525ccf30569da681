/**
 * The value a plain object holds under `name` itself, never one it inherits: a name that comes
 * from a request (a tier's header, a JWT claim, an operator's query) may be `constructor`,
 * `__proto__` or `toString`, which every object answers from its prototype.
 *
 * @example ownValue({ gold: 1 }, "constructor") // undefined, not Object
 */
export function ownValue<T>(record: Readonly<Record<string, T>> | undefined, name: string): T | undefined {
  return record !== undefined && Object.hasOwn(record, name) ? record[name] : undefined;
}
