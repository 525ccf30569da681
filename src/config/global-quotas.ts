import { ownValue } from "../util/own.js";
import { hasTrait } from "../features/rate-limit/algorithms/registry.js";
import { ADAPTIVE_LIMIT } from "../features/rate-limit/adaptive/schema.js";
import type { ConfigWarning } from "./route-warnings.js";
import type { LimitSettings, SluiceSettings } from "./schema.js";

/**
 * A shared quota kept per region: a limit no client part keys (its key is made only of `global`
 * and `path`) at `scope = "region"` in a deployment of several regions. Each region has its own
 * bucket, so the origin behind it sees the rate once per region: an SMS provider capped at 400/s,
 * limited at 400/s in two regions, receives up to 800/s. A limit keyed on a client part (ip,
 * header:, query:, cookie:, jwt:) is a client's fair share, where per region is the product's rule;
 * a header that names a provider is still set by the client, so it counts as a client part.
 */
export interface ScopeWarning extends ConfigWarning {
  limit: string;
  /** The field to change, as configuration errors name theirs: `SLUICE.routes[0].limits[1].scope`. */
  field: string;
}

/** Key parts that name no client: every client's requests land in the same bucket (per path for `path`). */
const SHARED_PARTS: ReadonlySet<string> = new Set(["global", "path"]);

/**
 * The warnings for shared quotas left per region, naming route and limit, what the origin will see
 * and the fix. `written` is the `SLUICE` value as configured (parsed JSON if it was text): after
 * parsing a default `scope` and a written one look alike, and `scope = "region"` written out is
 * how a deliberate per-region limit says so (it silences the warning).
 *
 * @example globalQuotaWarnings(config, raw)[0]?.message // 'route "sms", limit "provider": key "global" ... up to 800/1s at the origin ...'
 */
export function globalQuotaWarnings(
  config: Pick<SluiceSettings, "routes" | "regions" | "home_region">,
  written: unknown,
): ScopeWarning[] {
  // every region, the home one included (as allRegions in src/region, which imports the config's types)
  const regions = [...new Set([config.home_region, ...Object.keys(config.regions)])].sort();
  if (regions.length < 2) return [];
  const warnings: ScopeWarning[] = [];
  config.routes.forEach((route, ri) =>
    route.limits.forEach((limit, li) => {
      // a route's adaptive limit follows each region's origin latency on purpose
      if (limit.scope !== "region" || limit.name === ADAPTIVE_LIMIT || !limit.key.every((p) => SHARED_PARTS.has(p)))
        return;
      if (writtenScope(written, ri, li) !== undefined) return;
      warnings.push({
        route: route.name,
        limit: limit.name,
        field: `SLUICE.routes[${ri}].limits[${li}].scope`,
        message: messageFor(route.name, limit, regions),
      });
    }),
  );
  return warnings;
}

function messageFor(route: string, limit: LimitSettings, regions: string[]): string {
  const n = regions.length;
  const key = limit.key.length === 1 ? `"${limit.key[0]}"` : JSON.stringify(limit.key);
  const per = limit.key.includes("path") ? " per path" : "";
  const inFlight = hasTrait(limit.algorithm, "inFlight");
  const figure = (count: number) => (inFlight ? `${count} in flight` : `${count}/${formatPeriod(limit.period)}`);
  const fix = inFlight
    ? 'set scope = "global" (one set of slots in the home region\'s Redis, a round trip there)'
    : 'set scope = "global" (one bucket in the home region\'s Redis, a round trip there) or scope = "split" ' +
      "(the rate shared among regions by demand, decided at regional latency)";
  return (
    `route "${route}", limit "${limit.name}": key ${key} runs at scope = "region" (the default) in ${n} regions ` +
    `(${regions.join(", ")}): ${figure(limit.rate)} per region × ${n} regions = up to ${figure(limit.rate * n)}${per} ` +
    `at the origin. For a quota the origin or a provider enforces in all, ${fix}; ` +
    `if a per-region limit is meant, write scope = "region" to say so.`
  );
}

/** The `scope` written for a limit in the configuration as given, if any. */
function writtenScope(written: unknown, routeIndex: number, limitIndex: number): unknown {
  const routes = field(written, "routes");
  const route = Array.isArray(routes) ? (routes[routeIndex] as unknown) : undefined;
  const limits = field(route, "limits");
  return Array.isArray(limits) ? field(limits[limitIndex] as unknown, "scope") : undefined;
}

function field(value: unknown, name: string): unknown {
  return typeof value === "object" && value !== null ? ownValue(value as Record<string, unknown>, name) : undefined;
}

const UNITS: ReadonlyArray<[string, number]> = [
  ["d", 86_400_000],
  ["h", 3_600_000],
  ["m", 60_000],
  ["s", 1_000],
];

/** A period as the configuration writes it: 1000 → "1s", 90000 → "90s", 1500 → "1500ms". */
export function formatPeriod(ms: number): string {
  const unit = UNITS.find(([, size]) => ms % size === 0);
  return unit ? `${ms / unit[1]}${unit[0]}` : `${ms}ms`;
}
