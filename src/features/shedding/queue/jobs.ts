import { hashIdentifier } from "../../../identity/hash.js";
import { jobKey as jobKeyOfHash, jobLeaseKey } from "../../../store/layout.js";
import type { Store } from "../../../store/redis.js";

/** What a queued request's status says: `queued`, then `delivered` (with the origin's status) or `failed`. */
export interface JobStatus {
  id: string;
  status: "queued" | "delivered" | "failed";
  route: string;
  origin_status?: number;
  failures: number;
  dead_letter?: boolean;
  /** The origin answered with something that could not be relayed: it may have acted, so the job is not sent again. */
  indeterminate?: boolean;
  /** Dropped unsent: older than the route's `queue.max_age`. */
  expired?: boolean;
  updated_at: string;
}

/** Job ids are random UUIDs minted by sluice; anything else is refused before it nears Redis. */
export const JOB_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** Where the status of job `id` is kept (in the home region's Redis); the id reaches the key hashed. */
export async function jobKey(prefix: string, id: string): Promise<string> {
  return jobKeyOfHash(prefix, await hashIdentifier(id));
}

/**
 * Writes a job's status. `onlyIfNew` is for the first `queued` write, which races the consumer:
 * it must never overwrite a `delivered` that landed first.
 */
export async function writeJob(
  store: Store,
  prefix: string,
  job: JobStatus,
  ttlMs: number,
  onlyIfNew = false,
): Promise<void> {
  const key = await jobKey(prefix, job.id);
  await store.keys.set(key, JSON.stringify(job), { px: ttlMs, nx: onlyIfNew });
}

export async function readJob(store: Store, prefix: string, id: string): Promise<JobStatus | undefined> {
  const raw = await store.keys.get(await jobKey(prefix, id));
  return raw ? (JSON.parse(raw) as JobStatus) : undefined;
}

/**
 * A short lease on delivering a job, so that a message the queue hands out twice (it delivers at
 * least once) reaches the origin once. Returns false when another consumer holds it.
 */
export async function leaseJob(store: Store, prefix: string, id: string, ms: number): Promise<boolean> {
  return store.keys.set(jobLeaseKey(prefix, await hashIdentifier(id)), "1", { px: ms, nx: true });
}

/** Gives the delivery lease back, so the next copy of the message need not wait it out. */
export async function releaseJob(store: Store, prefix: string, id: string): Promise<void> {
  await store.keys.del(jobLeaseKey(prefix, await hashIdentifier(id)));
}
