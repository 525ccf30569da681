/*
 * A queued job's completion callback: the client names an https URL in `Sluice-Callback`, the
 * route's `queue.callbacks` allowlist must match it (checked at enqueue, a 400 problem otherwise,
 * and again before the call, against the configuration then in force), and the consumer POSTs the
 * job's outcome to it once the job is done. The allowlist is what keeps a client from making the
 * Worker call anywhere it likes: no redirect is followed, and nothing of the origin's answer
 * but its status is sent.
 */
import type { Route } from "../../../config/index.js";
import { Problem } from "../../../problem.js";
import { PROBLEMS } from "../../../problem-types.js";
import { log, logError } from "../../../util/log.js";
import type { JobMessage } from "./queue.js";
import { callbackAllowed } from "../../../origin/callback-allowlist.js";

export const CALLBACK_HEADER = "sluice-callback";
const MAX_URL = 2_048;
const CALL_TIMEOUT_MS = 5_000;

/**
 * The job's callback URL from the request's `Sluice-Callback` (normalised), or undefined without
 * one. Anything but an https URL the route's `queue.callbacks` allows is a 400 problem.
 */
export function callbackOf(request: Request, route: Route): string | undefined {
  const given = request.headers.get(CALLBACK_HEADER);
  if (given === null) return undefined;
  const refuse = (why: string) => new Problem({ type: PROBLEMS.callbackNotAllowed, detail: `Sluice-Callback ${why}` });
  if (given.length > MAX_URL) throw refuse(`is longer than ${MAX_URL} characters`);
  let url: URL;
  try {
    url = new URL(given);
  } catch {
    throw refuse("is not a URL");
  }
  if (url.protocol !== "https:" || url.username || url.password)
    throw refuse("must be an https URL without credentials");
  if (!callbackAllowed(url.href, route.queue.callbacks))
    throw refuse(`is not in the queue.callbacks allowlist of route "${route.name}"`);
  return url.href;
}

/** What a callback is told: the job, how it ended, and the origin's status (when it answered). */
export interface CallbackOutcome {
  status: "delivered" | "failed";
  origin_status?: number;
  expired?: boolean;
}

/**
 * POSTs the job's outcome to its callback, once, if the route still allows the URL. A callback
 * that fails is logged, not retried: the job's status stays readable at its Location.
 */
export async function callBack(m: JobMessage, route: Route, outcome: CallbackOutcome): Promise<void> {
  if (!m.callback) return;
  if (!callbackAllowed(m.callback, route.queue.callbacks))
    return log("job_callback_refused", { job: m.id, route: route.name });
  const body = JSON.stringify({ job_id: m.id, route: route.name, failures: m.failures, ...outcome });
  try {
    const res = await fetch(m.callback, {
      method: "POST",
      headers: { "content-type": "application/json", "sluice-job-id": m.id },
      body,
      redirect: "manual",
      signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
    });
    await res.body?.cancel();
    if (res.status >= 300) log("job_callback_failed", { job: m.id, route: route.name, status: res.status });
  } catch (e) {
    logError("job_callback_failed", e, { job: m.id, route: route.name });
  }
}
