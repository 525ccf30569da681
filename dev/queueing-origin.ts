/**
 * An origin that behaves like a server with a queue, for the bench's origin-protection section and
 * for tests of limits that protect an origin. `servers` requests are served at once in
 * `serviceMs`; more share them, so each takes longer (a request arriving with `n` in flight,
 * itself included, takes `serviceMs × n / servers`); past `knee` in flight the server is
 * overloaded: the request still holds its place for `serviceMs × knee / servers` and then fails
 * with a 503. That last part is what makes an unprotected origin collapse: under twice its
 * capacity the failing requests keep the count above the knee, and almost nothing succeeds.
 *
 * @example
 * const origin = await startQueueingOrigin({ servers: 4, serviceMs: 100, knee: 16 }); // 40/s
 * // ... ORIGIN_URL = origin.url; send load; then origin.stats().maxInFlight
 * await origin.close();
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface QueueingModel {
  /** Requests served at once at full speed. */
  servers: number;
  /** How long one request takes with at most `servers` in flight, ms. */
  serviceMs: number;
  /** Past this many in flight (the arriving request included), requests fail with 503. */
  knee: number;
}

export interface QueueingStats {
  /** Requests answered 200. */
  ok: number;
  /** Requests answered 503 (arrived past the knee). */
  failed: number;
  /** The most requests in flight at once (counted at each arrival). */
  maxInFlight: number;
}

export interface QueueingOrigin {
  /** http://127.0.0.1:<port> */
  url: string;
  /** Changes the model for requests arriving from now on (those in flight keep their time). */
  setModel(m: Partial<QueueingModel>): void;
  /** Requests being served now (a request counts until its time is up, even if its client left). */
  inFlight(): number;
  stats(): QueueingStats;
  /** Zeroes the stats (requests in flight keep counting in `inFlight`). */
  reset(): void;
  close(): Promise<void>;
}

/** What the model does with a request arriving with `n` in flight (itself included). */
export function serviceOf(model: QueueingModel, n: number): { ms: number; status: 200 | 503 } {
  if (n > model.knee) return { ms: (model.serviceMs * model.knee) / model.servers, status: 503 };
  return { ms: model.serviceMs * Math.max(1, n / model.servers), status: 200 };
}

function checked(m: QueueingModel): QueueingModel {
  const whole = (v: number, min: number) => Number.isFinite(v) && v >= min;
  if (!whole(m.servers, 1) || !whole(m.serviceMs, 0) || !whole(m.knee, 1))
    throw new Error(`queueing origin: servers and knee must be ≥ 1, serviceMs ≥ 0 (got ${JSON.stringify(m)})`);
  return { ...m };
}

export async function startQueueingOrigin(model: QueueingModel): Promise<QueueingOrigin> {
  let current = checked(model);
  let inFlight = 0;
  let stats: QueueingStats = { ok: 0, failed: 0, maxInFlight: 0 };
  const timers = new Set<NodeJS.Timeout>();

  const serve = (req: IncomingMessage, res: ServerResponse) => {
    req.resume(); // the body is not read, only drained
    const n = ++inFlight;
    stats.maxInFlight = Math.max(stats.maxInFlight, n);
    const { ms, status } = serviceOf(current, n);
    const timer = setTimeout(() => {
      timers.delete(timer);
      inFlight--;
      if (status === 200) stats.ok++;
      else stats.failed++;
      const body = status === 200 ? { ok: true, in_flight: n } : { error: "overloaded", in_flight: n };
      res.writeHead(status, { "content-type": "application/json", "x-origin": "queueing" });
      res.end(JSON.stringify(body));
    }, ms);
    timers.add(timer);
  };
  const server = createServer(serve);
  // port 0: the OS picks a free port while we listen on it (no window for another process to take it)
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    setModel: (m) => (current = checked({ ...current, ...m })),
    inFlight: () => inFlight,
    stats: () => ({ ...stats }),
    reset: () => (stats = { ok: 0, failed: 0, maxInFlight: 0 }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const t of timers) clearTimeout(t);
        timers.clear();
        inFlight = 0;
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
