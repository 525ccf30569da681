import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";

export interface SickOrigin {
  url: string;
  /** Every request that reached it, in arrival order (recorded once its body is in). */
  seen: Array<{ method: string; path: string; headers: IncomingHttpHeaders; body: string }>;
  /** Requests with a `hold` segment not answered yet. */
  readonly holding: number;
  /** Answers every request held so far (`hold`), as a `200` echo, and those that come later at once, until `hold()`. */
  release(): void;
  /** Holds `hold` requests again (as at the start). */
  hold(): void;
  close(): Promise<void>;
}

/**
 * An origin that fails as the request's path says, whatever the query and headers (which a
 * divert origin would get as well): a segment `fail` answers `503`, a segment `hang` never
 * answers (until the origin closes), anything else `200` with a JSON echo. For failover tests,
 * where the main origin must fail and the divert origin, sent the same request, must not.
 */
export async function startSickOrigin(): Promise<SickOrigin> {
  const seen: SickOrigin["seen"] = [];
  const held: Array<() => void> = [];
  let released = false;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const path = new URL(req.url ?? "/", "http://origin").pathname;
      const body = Buffer.concat(chunks).toString("utf8");
      seen.push({ method: req.method ?? "GET", path, headers: req.headers, body });
      const segments = path.split("/");
      if (segments.includes("hang")) return;
      const status = segments.includes("fail") ? 503 : 200;
      const answer = () => {
        res.writeHead(status, { "content-type": "application/json", "x-origin": "sick" });
        res.end(JSON.stringify({ origin: "sick", method: req.method, path, status, body }));
      };
      if (segments.includes("hold") && !released) held.push(answer);
      else answer();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    get holding() {
      return held.length;
    },
    release: () => {
      released = true;
      for (const answer of held.splice(0)) answer();
    },
    hold: () => {
      released = false;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
