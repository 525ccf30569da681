/**
 * The set-up the in-process middleware tests (src/middleware/{name}/{name}.test.ts and
 * src/middleware/standalone.test.ts) share: each runs middleware in a Hono app of its own, in
 * Node, against a real Redis behind the Upstash-REST bridge.
 */
import { Hono, type Context, type ExecutionContext, type MiddlewareHandler } from "hono";
import { Runtime, type SluiceEnv } from "../../src/index.js";
import { fileRedis, TOKEN } from "../integration/stack.js";

/** A Redis budget the loaded test machine can meet (the default is meant for production). */
export const TIMEOUT_MS = 10_000;

/** How a middleware reaches the file's Redis: the bridge, and an isolate state of its own. */
export interface Connection {
  redis: { url: string; token: string };
  runtime: Runtime;
}

/** The shared options every test gives a middleware: a connection, a fresh key_prefix, a budget. */
export interface RigOptions extends Connection {
  key_prefix: string;
  timeout_ms: number;
}

export interface MiddlewareRig {
  /** The file's Redis stack and an Upstash client through its bridge (see `fileRedis()`). */
  db: ReturnType<typeof fileRedis>;
  /** A key_prefix no other call gives: `{name}{n}`, so tests share no buckets, locks or lists. */
  prefix(): string;
  /** The bridge's URL and token, and a fresh `Runtime` (no isolate state carried over between tests). */
  connection(): Connection;
  /**
   * `connection()`, a fresh `prefix()` and `timeout_ms: TIMEOUT_MS`, then `extra` (which wins).
   *
   * @example rateLimit(options({ limits, shadow: true }))
   */
  options<T extends object = Record<never, never>>(extra?: T): RigOptions & T;
}

/**
 * Starts the file's Redis stack (with `fileRedis()`: beforeAll/afterAll hooks, so call it at the
 * file's top level) and gives what a test needs to point a middleware at it. `name` starts every
 * key_prefix, so a stray key says which file wrote it.
 *
 * @example
 * const { db, options } = middlewareRig("acl");
 * it("...", async () => { const opts = options(); await db.redis.hset(`${opts.key_prefix}:lists`, ...) });
 */
export function middlewareRig(name: string): MiddlewareRig {
  const db = fileRedis();
  let seq = 0;
  const prefix = () => `${name}${++seq}`;
  // db.stack throws before the hooks have run: read it when a test asks, not now
  const connection = (): Connection => ({ redis: { url: db.stack.bridge.url, token: TOKEN }, runtime: new Runtime() });
  return {
    db,
    prefix,
    connection,
    options: <T extends object>(extra?: T) =>
      ({ ...connection(), key_prefix: prefix(), timeout_ms: TIMEOUT_MS, ...extra }) as RigOptions & T,
  };
}

/** A request from the client `ip` (as Cloudflare names it, in CF-Connecting-IP), with more `headers`. */
export const from = (ip: string, headers: Record<string, string> = {}): RequestInit => ({
  headers: { "CF-Connecting-IP": ip, ...headers },
});

/** A Hono app behind one middleware, and how many times its handler ran. */
export interface CountedApp {
  app: Hono<SluiceEnv>;
  /** `n`: the handler's runs so far (counted as each run starts, also when it then throws). */
  calls: { n: number };
}

/**
 * An app with `middleware` in front of `path` (default every path) and `handler` behind it, for
 * `method` (a method or several; default all of them). The handler gets the run's number, from 1.
 *
 * @example const { app, calls } = countedApp(accessLists(opts), (c) => c.text("hello"), { method: "GET" });
 */
export function countedApp(
  middleware: MiddlewareHandler<SluiceEnv>,
  handler: (c: Context<SluiceEnv>, n: number) => Response | Promise<Response>,
  { path = "*", method = "ALL" }: { path?: string; method?: string | string[] } = {},
): CountedApp {
  const app = new Hono<SluiceEnv>();
  const calls = { n: 0 };
  app.use(path, middleware);
  app.on([method].flat(), path, (c: Context<SluiceEnv>) => handler(c, ++calls.n));
  return { app, calls };
}

/** An ExecutionContext for `app.request(..., ctx)` that keeps what the middleware hands to `waitUntil`. */
export interface Background {
  ctx: ExecutionContext;
  /** Resolves once all of it has settled (and whatever that handed on in turn). */
  settled(): Promise<void>;
}

/**
 * What the middleware hands to `waitUntil` (storing an answer, freeing a lock after the response),
 * so a test can wait for it instead of sleeping.
 *
 * @example const bg = background(); await app.request("/orders", init, {}, bg.ctx); await bg.settled();
 */
export function background(): Background {
  const pending: Promise<unknown>[] = [];
  const ctx: ExecutionContext = {
    waitUntil: (p) => void pending.push(p),
    passThroughOnException: () => undefined,
    props: {},
  };
  return {
    ctx,
    async settled(): Promise<void> {
      while (pending.length > 0) await Promise.allSettled(pending.splice(0));
    },
  };
}

/** A gate handlers wait at, so a test can hold requests in flight for as long as it needs. */
export interface Gate {
  /** For the handler (a function of its own, so it can be passed on): resolves once the gate is open. */
  wait: () => Promise<void>;
  /** Resolves once `n` calls (default 1) have come to the gate. */
  reached(n?: number): Promise<void>;
  /** Lets every call through: those waiting, and any that come later. */
  open(): void;
}

/**
 * A closed gate.
 *
 * @example
 * const g = gate();
 * const first = app.request("/tool", init); // its handler awaits g.wait()
 * await g.reached(); // ... the request is in flight ...
 * g.open();
 */
export function gate(): Gate {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  let arrivals = 0;
  const watchers: Array<{ n: number; resolve: () => void }> = [];
  const notify = () => {
    for (const due of watchers.filter((w) => arrivals >= w.n)) {
      watchers.splice(watchers.indexOf(due), 1);
      due.resolve();
    }
  };
  return {
    wait: () => {
      arrivals++;
      notify();
      return opened;
    },
    reached: (n = 1) =>
      new Promise<void>((resolve) => {
        watchers.push({ n, resolve });
        notify();
      }),
    open: () => open(),
  };
}
