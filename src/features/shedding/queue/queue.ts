import type { Route } from "../../../config/index.js";
import type { ClaimTicket } from "../../guard/idempotency/record-ref.js";
import type { SessionTicket } from "../../guard/session/lock-hold.js";
import { claimText, type RequestFacts } from "../../../identity/identify.js";
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
  /**
   * The host and scheme the client asked for, told to the origin as on the live path
   * (`X-Forwarded-Host`, `X-Forwarded-Proto`, `Forwarded`). Absent in jobs queued before they were kept.
   */
  host?: string;
  proto?: "http" | "https";
  /**
   * The verified JWT claims the route's decision reads (limit keys, tiers, priority), as the
   * decision reads them (text), and no others. Trusted because sluice wrote them after verifying
   * the token: the queue is sluice's own (docs/security.md).
   */
  claims?: Record<string, string>;
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
 * Turns a shed request into a job message: method, path, query, host and scheme, the route's
 * chosen headers, what its decision reads (the headers and cookies its limits key on or take
 * their tier or cost from, and its priority's; the verified claims of those it reads from the
 * JWT), so that the consumer decides it exactly as the live request was, and the body up to
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
  const parts = decisionParts(route);
  // the headers the decision reads: the consumer decides the job as the live request was
  const keep = new Set([
    ...route.queue.headers,
    ...parts.flatMap((k) =>
      k.startsWith("header:") ? [k.slice(7).toLowerCase()] : k.startsWith("cookie:") ? ["cookie"] : [],
    ),
  ]);
  const read = declaresMoreThan(request, route.queue.max_body)
    ? { whole: false as const }
    : await readCapped(request.body, route.queue.max_body);
  if (!read.whole) throw tooLarge(route.queue.max_body);
  const bytes = read.bytes;
  const url = facts.url;
  const claims = claimsRead(parts, facts.claims);
  return {
    id: crypto.randomUUID(),
    route: route.name,
    region,
    method,
    path: forwardPath,
    matchPath: facts.matchPath,
    search: facts.url.search,
    ip: facts.ip,
    host: url.host,
    proto: url.protocol === "http:" ? "http" : "https",
    ...(claims ? { claims } : {}),
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

/**
 * The key parts the route's decision reads: each limit's key, tier and cost header, and the
 * priority's key. What a job must carry to be decided as its live request was.
 */
export function decisionParts(route: Route): string[] {
  const priority = typeof route.priority === "string" ? [route.priority] : [];
  return [
    ...route.limits.flatMap((l) => [
      ...l.key,
      ...(l.tier ? [l.tier] : []),
      ...(l.costHeader ? [`header:${l.costHeader}`] : []),
    ]),
    ...priority,
  ];
}

/**
 * The verified claims the decision reads, as text (what `readPart` reads a key as), or undefined
 * when it reads none or the request had none of them. Claims the route does not read stay out of
 * the job: it carries what its decision needs, nothing of the token besides.
 */
export function claimsRead(
  parts: readonly string[],
  claims: Record<string, unknown> | undefined,
): Record<string, string> | undefined {
  if (!claims) return undefined;
  const read = parts.flatMap((part): Array<[string, string]> => {
    if (!part.startsWith("jwt:")) return [];
    const text = claimText(claims[part.slice(4)]);
    return text === undefined ? [] : [[part.slice(4), text]];
  });
  // own properties of the job, whatever a claim is named (`__proto__` too)
  return read.length > 0 ? Object.fromEntries(read) : undefined;
}

/**
 * The most a job may weigh, as the JSON the queue is sent: the Queues limit on a message is
 * 128 KB; 1 KB of it is left for what the consumer adds to its copies (failures, dead-letter mark).
 */
export const MAX_JOB_BYTES = 127_000;

/** A job larger than a queue message may be (a body near `max_body` grows by a third in base64): 413, not queued. */
export function checkJobSize(m: JobMessage): void {
  const size = new TextEncoder().encode(JSON.stringify(m)).byteLength;
  if (size > MAX_JOB_BYTES)
    throw new Problem({
      type: PROBLEMS.requestTooLargeToQueue,
      detail: `the job would be ${size} bytes (body in base64, kept headers and claims), past the ${MAX_JOB_BYTES} a queue message may hold`,
    });
}

/**
 * The job's request, rebuilt for forwarding: at the host and scheme the client asked for, so the
 * origin is told them as on the live path. A job without them (queued before they were kept) uses
 * a placeholder host.
 */
export function requestOf(m: JobMessage): Request {
  return new Request(`${baseOf(m)}${m.path}${m.search}`, {
    method: m.method,
    headers: m.headers,
    body: m.body === null ? null : fromBase64(m.body),
  });
}

function baseOf(m: JobMessage): string {
  if (!m.host || (m.proto !== "http" && m.proto !== "https")) return "https://queued.sluice";
  const base = `${m.proto}://${m.host}`;
  try {
    // a host that would read as more than one (a path, credentials) is not the one sluice kept
    if (new URL(base).host === m.host) return base;
  } catch {
    // not a host at all: the placeholder
  }
  return "https://queued.sluice";
}

function tooLarge(max: number): Problem {
  return new Problem({
    type: PROBLEMS.requestTooLargeToQueue,
    detail: `queued requests may carry at most ${max} bytes of body`,
  });
}
