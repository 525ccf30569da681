import type { Route } from "../../../config/index.js";
import type { RequestFacts } from "../../../identity/identify.js";
import type { ClaimTicket } from "../../idempotency/records.js";
import type { SessionTicket } from "../../session/guard.js";
import { fromBase64, toBase64 } from "../../../util/base64.js";
import { declaresMoreThan, readCapped } from "../../../util/body.js";
import { Problem } from "../../../problem.js";
import { PROBLEMS } from "../../../problem-types.js";

/** A shed request as it travels through the queue. */
export interface JobMessage {
  id: string;
  route: string;
  region: string;
  method: string;
  /** The normalised path the origin gets, and the one limits match on. */
  path: string;
  matchPath: string;
  search: string;
  ip: string;
  headers: Array<[string, string]>;
  /** Base64 of the body, or null. */
  body: string | null;
  /** Origin failures (5xx, network) so far; rate-limit deferrals do not count. */
  failures: number;
  enqueuedAt: number;
  /** The https URL (allowed by the route's `queue.callbacks`) told the job's outcome once it is done. */
  callback?: string;
  /** Counted in the route's backlog (depth.ts) when queued, so taken off it once done with. */
  counted?: true;
  /** The hash of the client whose `max_per_client` share the job takes (depth.ts), given back with it. */
  client?: string;
  /** Set on the copy sent to the dead-letter queue, so the consumer can tell it apart. */
  deadLetter?: true;
  /** The idempotency claim the job holds (hashes and owner only), settled by the consumer. */
  claim?: ClaimTicket;
  /** The session lock the job holds, released by the consumer once the job is done. */
  session?: SessionTicket;
  /** What the origin is told, as on the live path: fencing token, Idempotency-Key, session. */
  sluiceHeaders?: Record<string, string>;
}

export const JOBS_PATH = "/__sluice-jobs/";

/**
 * Turns a shed request into a job message: method, path, query, the route's chosen headers (and
 * any header its limits key on, so the consumer finds the same buckets), and the body up to
 * `max_body`, counted as it is read (larger is a 413 problem: nothing is queued that cannot be
 * delivered whole).
 */
export async function toJob(
  request: Request,
  route: Route,
  facts: RequestFacts,
  region: string,
  forwardPath: string,
  // the method the guards decided on (an honoured override's): a delivery forwards no override header
  method = request.method,
): Promise<JobMessage> {
  const keep = new Set([
    ...route.queue.headers,
    // the headers the limits key on, and the priority's: the consumer decides the job as the live request was
    ...[...route.limits.flatMap((l) => l.key), typeof route.priority === "string" ? route.priority : ""].flatMap((k) =>
      k.startsWith("header:") ? [k.slice(7).toLowerCase()] : k.startsWith("cookie:") ? ["cookie"] : [],
    ),
  ]);
  const read = declaresMoreThan(request, route.queue.max_body)
    ? { whole: false as const }
    : await readCapped(request.body, route.queue.max_body);
  if (!read.whole) throw tooLarge(route.queue.max_body);
  const bytes = read.bytes;
  return {
    id: crypto.randomUUID(),
    route: route.name,
    region,
    method,
    path: forwardPath,
    matchPath: facts.matchPath,
    search: facts.url.search,
    ip: facts.ip,
    headers: [...request.headers].filter(([h]) => keep.has(h.toLowerCase())),
    body: bytes.length > 0 ? toBase64(bytes) : null,
    failures: 0,
    enqueuedAt: Date.now(),
  };
}

/** The 202 a client gets for a queued request: where to read the job's status. */
export function accepted(id: string, retryAfterMs: number): Response {
  const location = `${JOBS_PATH}${id}`;
  return new Response(JSON.stringify({ job_id: id, status: "queued", location }), {
    status: 202,
    headers: {
      "content-type": "application/json",
      location,
      "retry-after": String(Math.max(1, Math.ceil(retryAfterMs / 1000))),
      "cache-control": "no-store",
    },
  });
}

/** The job's request, rebuilt for forwarding. */
export function requestOf(m: JobMessage): Request {
  return new Request(`https://queued.sluice${m.path}${m.search}`, {
    method: m.method,
    headers: m.headers,
    body: m.body === null ? null : fromBase64(m.body),
  });
}

function tooLarge(max: number): Problem {
  return new Problem({
    type: PROBLEMS.requestTooLargeToQueue,
    detail: `queued requests may carry at most ${max} bytes of body`,
  });
}
