import type { Context } from "hono";
import type { Scope, Step } from "../../context.js";
import { Problem } from "../../problem.js";
import { PROBLEMS } from "../../problem-types.js";
import { listsOf } from "./lists.js";

/**
 * The request's claims for the lists, read by the JWT capability (`claimsForLists`,
 * src/features/jwt/step.ts) and handed in where the steps are composed, so the lists carry no JWT
 * code of their own. Verified claims go to the request's facts (allow and deny entries match them,
 * and the route's own steps reuse them): nothing is returned. A token that does not verify gives
 * only the claims it states, returned: deny entries alone match them, so a banned client's expired
 * or re-signed token keeps it banned, while no forged claim can put a client on the allow list.
 */
export type ListClaims = (c: Context, scope: Scope) => Promise<Record<string, unknown> | undefined>;

/**
 * The deny and allow lists (kept in the home region's Redis, managed with the admin API): a
 * denied client gets 403 before anything else; an allowed one skips the limits of the routes its
 * entry names (idempotency and sessions still apply). When an entry names a JWT claim, the bearer
 * token is verified here (`claimsOf`), on every route, so a `jwt:sub=…` entry matches wherever the
 * client goes.
 */
export const accessListsStep =
  (claimsOf: ListClaims): Step =>
  async (c, scope, next) => {
    const source = { prefix: scope.config.key_prefix, store: scope.stores.home() };
    const lists = listsOf(scope.runtime);
    const claimed = (await lists.namesClaims(source, scope.defer)) ? await claimsOf(c, scope) : undefined;
    const listed = await lists.verdict(source, scope.facts, scope.route?.name, scope.defer, claimed);
    if (listed === "deny") {
      scope.meta = { route: scope.route?.name ?? "-", limit: "deny-list" };
      throw new Problem({ type: PROBLEMS.forbidden, detail: "this client is on the deny list" });
    }
    scope.allowListed = listed === "allow";
    await next();
  };
