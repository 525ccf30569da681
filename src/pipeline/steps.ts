import type { Step } from "../context.js";
import { accessListsStep } from "../features/access/step.js";
import { banOnRefusal } from "../features/access/bans.js";
import { breakerStep } from "../features/breaker/step.js";
import { guardStep } from "../features/guard/step.js";
import { rateLimitStep } from "../features/rate-limit/step.js";
import { keepFallbackCopies, shed } from "../features/shedding/step.js";
import { claimsForLists, verifyJwtStep } from "../features/jwt/step.js";
import { jobStatus } from "../features/shedding/queue/enqueue.js";
import { modeDivertStep, routeModeStep } from "../features/access/mode/step.js";
import { mcpStep } from "../features/mcp/step.js";

/** The steps of the request path, in the order a request meets them (the gateway's and `sluice()`'s). */
export const PIPELINE_STEPS: Step[] = [
  jobStatus, //                         GET /__sluice-jobs/{id}: a queued request's status
  accessListsStep(claimsForLists), //   deny list → 403 (a jwt: entry verifies the token first, by the JWT
  //                                    capability's claimsForLists); an allow-listed client skips the limits
  routeModeStep, //                     the operator's degrade switch: answers as fallback/reject would;
  //                                    `open` and `divert` skip the limits
  verifyJwtStep, //                     claims, for routes keyed on the JWT
  breakerStep, //                       open → fallback or 503; records the origin's outcome after the response
  mcpStep(banOnRefusal), //             an MCP route: each tools/call limited per tool, a guarded one run once
  //                                    (docs/mcp.md); a refused call counts towards a ban
  rateLimitStep(shed, banOnRefusal), // one Redis call decides every limit; a refusal is shed as on_limit says,
  //                                    and counts towards a ban (banOnRefusal: the lists write it)
  guardStep, //                         one side effect per key, one call per session at a time; duplicates get
  //                                    the replay; the key settled with the origin's outcome, the lock released
  //                                    once it is known
  modeDivertStep, //                    the `divert` switch: the divert origin answers, under the claim and
  //                                    session just taken
  keepFallbackCopies, //                keeps the last good copy of a fallback route's page after the response
];
