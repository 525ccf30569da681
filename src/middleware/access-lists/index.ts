import { Problem } from "../../problem.js";
import type { Step } from "../step.js";

/**
 * The deny and allow lists (kept in the home region's Redis, managed with the admin API): a
 * denied client gets 403 before anything else; an allowed one skips the limits of the routes its
 * entry names (idempotency and sessions still apply).
 */
export const accessListsStep: Step = async (_c, scope, next) => {
  const source = { prefix: scope.config.key_prefix, store: scope.stores.home() };
  const listed = await scope.runtime.lists.verdict(source, scope.facts, scope.route?.name, scope.defer);
  if (listed === "deny") {
    scope.meta = { route: scope.route?.name ?? "-", limit: "deny-list" };
    throw new Problem({ status: 403, title: "Forbidden", detail: "this client is on the deny list" });
  }
  scope.allowListed = listed === "allow";
  await next();
};
