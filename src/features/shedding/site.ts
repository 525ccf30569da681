import type { Route } from "../../config/index.js";
import type { RequestFacts } from "../../identity/identify.js";
import type { FieldCounter } from "../../metrics/idempotency.js";
import type { ForwardTarget } from "../../origin/forward.js";

/** What the shedder needs of the request: where it was going, and whom it came from. */
export interface ShedSite {
  request: Request;
  route: Route;
  /** The method the guards decide on (a `method_override` honoured). */
  method: string;
  /** The path the origin (and so the divert origin, and a copy's address) is asked for. */
  forwardPath: string;
  methodOverridden: boolean;
  facts: Pick<RequestFacts, "ip" | "url">;
  /** Where an allowed request goes (the gateway); a copy's `Vary` refers to what the origin is sent. */
  target?: ForwardTarget;
  metrics: FieldCounter;
}
