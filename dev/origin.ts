import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface SeenRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** When it arrived (ms since epoch). */
  at: number;
  /** The status the origin answered with. */
  status?: number;
}

export interface DemoOrigin {
  url: string;
  port: number;
  /** Every request that reached the origin, in arrival order. */
  seen: SeenRequest[];
  close(): Promise<void>;
}

/**
 * The demo origin: answers every request with a small JSON echo, so you can see what sluice
 * forwarded. `?status=503` picks the status, `?delay=200` waits that many ms first (or the
 * headers `x-demo-status` / `x-demo-delay`, which leave the URL alone), and `?cache-control=no-store`, `?set-cookie=a=1`, `?vary=accept-language` add those response headers
 * (the body then echoes the varying request header), for trying out what sluice keeps. With the
 * `chaos` option, paths under `/chaos/` get random latency and random 500s.
 *
 * @example const origin = await startOrigin({ port: 8788 }); // then ORIGIN_URL=origin.url
 */
type OriginOptions = { port?: number; host?: string; chaos?: { failRate: number; maxDelayMs: number } };

export async function startOrigin(opts: OriginOptions = {}): Promise<DemoOrigin> {
  const seen: SeenRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => serve(req, res, Buffer.concat(chunks).toString("utf8"), seen, opts));
  });
  await new Promise<void>((resolve) => server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Records one request, then answers it with the status and after the delay it asks for. */
function serve(req: IncomingMessage, res: ServerResponse, body: string, seen: SeenRequest[], opts: OriginOptions) {
  const url = new URL(req.url ?? "/", "http://origin");
  seen.push({ method: req.method ?? "GET", path: url.pathname, headers: req.headers, body, at: Date.now() });
  // under /chaos/, with the chaos option: random latency and random 500s, like a real bad day
  const chaos = opts.chaos && url.pathname.startsWith("/chaos/") ? opts.chaos : undefined;
  // the knobs also come as headers (`x-demo-status`, `x-demo-delay`): a retry can then change
  // them without changing the request's identity (an idempotency fingerprint covers the query)
  const knob = (name: string) => url.searchParams.get(name) ?? (req.headers[`x-demo-${name}`] as string | undefined);
  const status = chaos && Math.random() < chaos.failRate ? 500 : Number(knob("status") ?? 200) || 200;
  const delay = chaos
    ? Math.floor(Math.random() * chaos.maxDelayMs)
    : Math.min(10_000, Number(knob("delay") ?? 0) || 0);
  seen[seen.length - 1]!.status = status;
  setTimeout(() => {
    const headers: Record<string, string> = { "content-type": "application/json", "x-origin": "demo" };
    for (const h of ["cache-control", "set-cookie", "vary"]) {
      const v = url.searchParams.get(h);
      if (v) headers[h] = v;
    }
    const vary = url.searchParams.get("vary");
    const varied = vary ? req.headers[vary.toLowerCase()] : undefined;
    res.writeHead(status, headers);
    const echo = { origin: "demo", method: req.method, path: url.pathname, query: url.search, hit: seen.length };
    res.end(JSON.stringify({ ...echo, body, varied }));
  }, delay);
}
