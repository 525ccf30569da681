import type { Context } from "hono";
import type { Config } from "../../config/index.js";
import type { Scope, Step } from "../../context.js";
import { statedClaims } from "../jwt/jwt.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { jwtSecret, verifiedBearer } from "../jwt/step.js";
import { logFailure } from "../../util/log.js";
import { listsOf } from "./lists.js";

/**
 * The deny and allow lists (kept in the home region's Redis, managed with the admin API): a
 * denied client gets 403 before anything else; an allowed one skips the limits of the routes its
 * entry names (idempotency and sessions still apply). When an entry names a JWT claim, the bearer
 * token is verified here, on every route, so a `jwt:sub=…` entry matches wherever the client goes.
 */
export const accessListsStep: Step = async (c, scope, next) => {
  const source = { prefix: scope.config.key_prefix, store: scope.stores.home() };
  const lists = listsOf(scope.runtime);
  const claimed = (await lists.namesClaims(source, scope.defer)) ? await readClaims(c, scope) : undefined;
  const listed = await lists.verdict(source, scope.facts, scope.route?.name, scope.defer, claimed);
  if (listed === "deny") {
    scope.meta = { route: scope.route?.name ?? "-", limit: "deny-list" };
    throw new Problem({ type: PROBLEMS.forbidden, detail: "this client is on the deny list" });
  }
  scope.allowListed = listed === "allow";
  await next();
};

/**
 * The request's claims for the lists: verified ones go to its facts (allow and deny entries match
 * them, and the route's own steps reuse them). A token that does not verify gives only the claims
 * it states, which deny entries alone match: a banned client's expired or re-signed token keeps it
 * banned, while no forged claim can put a client on the allow list. Its 401 is the route's to give.
 */
async function readClaims(c: Context, scope: Scope): Promise<Record<string, unknown> | undefined> {
  if (scope.facts.claims) return undefined;
  const verified = await verifiedBearer(c, scope);
  if (verified.ok) {
    scope.facts.claims = verified.claims;
    return undefined;
  }
  warnUnverifiable(scope);
  return statedClaims(c.req.raw);
}

const warned = new WeakSet<Config>();

/** Once per configuration: `jwt:` entries but no key to verify tokens with (allow entries cannot match). */
function warnUnverifiable(scope: Scope): void {
  const settings = scope.config.jwt;
  const secret = jwtSecret(scope);
  if (settings?.jwks_url || (typeof secret === "string" && secret !== "") || warned.has(scope.config)) return;
  warned.add(scope.config);
  logFailure("lists_jwt_unverifiable", {
    detail: `the lists name JWT claims but there is no ${settings?.secret_env ?? "SLUICE_JWT_SECRET"} or jwt.jwks_url to verify tokens with: jwt: allow entries cannot match`,
  });
}
