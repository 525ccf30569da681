/**
 * The ids sluice shows of clients outside Redis key names (the ledger's principals and sessions,
 * the logs, the dashboard's refused clients and the labels kept for them): an HMAC of the key
 * name's hash under a deployment secret, so that nobody holding a log line or a ledger export
 * can test guesses against it (an unsalted SHA-256 of an IP gives the IP back after a /8's worth
 * of guesses: seconds). Key names keep their plain hash, so no deployment loses its buckets.
 *
 * The secret: `SLUICE_ID_KEY` when set, else `SLUICE_ADMIN_TOKEN` (every deployment with an admin
 * API has one; rotating it changes the ids from then on). With neither, ids are the plain hash:
 * pseudonyms only, which `npm run check` says.
 */
import { hex } from "../util/digest.js";
import { logFailure } from "../util/log.js";

const encoder = new TextEncoder();

/** Where the key comes from. */
export type IdKeySource = "SLUICE_ID_KEY" | "SLUICE_ADMIN_TOKEN";

/** The deployment's pseudonym secret, and its name. */
export interface IdKey {
  secret: string;
  source: IdKeySource;
}

/** The secrets an id key is read from (a Worker's bindings, an app's `c.env`). */
export interface IdKeyBindings {
  SLUICE_ID_KEY?: unknown;
  SLUICE_ADMIN_TOKEN?: unknown;
}

/** The deployment's id key: `SLUICE_ID_KEY`, else `SLUICE_ADMIN_TOKEN`; none when neither is a non-empty string. */
export function idKeyOf(env: IdKeyBindings | undefined): IdKey | undefined {
  for (const source of ["SLUICE_ID_KEY", "SLUICE_ADMIN_TOKEN"] as const) {
    const secret = env?.[source];
    if (typeof secret === "string" && secret !== "") return { secret, source };
  }
  return undefined;
}

/**
 * The HMAC keys imported so far, by secret (a deployment has one or two): imported once per
 * isolate, so an id costs one HMAC of 32 characters and no Redis call.
 */
const imported = new Map<string, Promise<CryptoKey>>();

/**
 * The id shown for a key name's hash: 32 hex digits (as the hash itself, so every filter and
 * column that takes one takes the other), HMAC-SHA-256 under the deployment's id key; the hash
 * unchanged without a key.
 *
 * @example await pseudonym(idKeyOf(env), bucketHash) // "3f9c…" (32 hex digits)
 */
export async function pseudonym(key: IdKey | undefined, hash: string): Promise<string> {
  if (!key) return unkeyed(hash);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", await hmacKey(key.secret), encoder.encode(hash)));
  return hex(mac.subarray(0, 16));
}

/** Whether this isolate has said that its ids are plain hashes (once is enough). */
let toldUnkeyed = false;

/** An id without a key is the hash as it is: said once per isolate, in the log, where such ids go. */
function unkeyed(hash: string): string {
  if (!toldUnkeyed) {
    toldUnkeyed = true;
    logFailure("ids_unkeyed", {
      detail:
        "neither SLUICE_ID_KEY nor SLUICE_ADMIN_TOKEN is set: client ids in the logs and the ledger are plain SHA-256 hashes (pseudonyms, reversible by guessing)",
    });
  }
  return hash;
}

function hmacKey(secret: string): Promise<CryptoKey> {
  let key = imported.get(secret);
  if (!key) imported.set(secret, (key = deriveKey(secret)));
  return key;
}

/**
 * A key of its own for ids, derived from the secret (HMAC of a fixed label): the admin token also
 * signs dashboard cookies, and no id must ever be a signature of anything else.
 */
async function deriveKey(secret: string): Promise<CryptoKey> {
  const hmac = { name: "HMAC", hash: "SHA-256" };
  const root = await crypto.subtle.importKey("raw", encoder.encode(secret), hmac, false, ["sign"]);
  const derived = await crypto.subtle.sign("HMAC", root, encoder.encode("sluice client ids v1"));
  return crypto.subtle.importKey("raw", derived, hmac, false, ["sign"]);
}
