import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { outcomeUnknown, sendToOrigin, withLateAnswer, type ForwardTarget } from "./forward.js";

/**
 * How a trip to the origin ended, told apart as idempotency needs it (under Node's fetch; workerd's
 * is covered by test/integration/agent-incident.test.ts): only a request that was never sent is
 * `unreachable`; a connection dropped after the request was read is `broken`; a timeout keeps the
 * origin's request alive when asked, and its late answer comes through.
 */
let server: Server;
let base: string;
beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.url === "/drop") return req.socket.destroy();
      setTimeout(() => res.writeHead(201, { "content-type": "text/plain" }).end("created"), 300);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))));

const target = (origin: string, path: string, extra: Partial<ForwardTarget> = {}): ForwardTarget => ({
  origin: new URL(origin),
  path,
  clientIp: "203.0.113.5",
  ...extra,
});
const post = () => new Request("http://sluice.test/x", { method: "POST", body: "{}" });

describe("sendToOrigin outcomes", () => {
  it("a refused connection was never sent: unreachable, a 502", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const reply = await sendToOrigin(post(), target(`http://127.0.0.1:${port}`, "/x"));
    expect([reply.outcome, reply.response.status, outcomeUnknown(reply)]).toEqual(["unreachable", 502, false]);
  });

  it("a connection dropped after the request was read is broken: the outcome is unknown", async () => {
    const reply = await sendToOrigin(post(), target(base, "/drop"));
    expect([reply.outcome, reply.response.status, outcomeUnknown(reply)]).toEqual(["broken", 502, true]);
  });

  it("a timeout is a 504; with lateAnswerMs the origin's answer still comes", async () => {
    const reply = await sendToOrigin(post(), target(base, "/slow", { timeoutMs: 100, lateAnswerMs: 5_000 }));
    expect([reply.outcome, reply.response.status]).toEqual(["timeout", 504]);
    const late = await withLateAnswer(reply);
    expect([late.outcome, late.response.status, await late.response.text()]).toEqual(["answered", 201, "created"]);
  });

  it("a timeout without lateAnswerMs abandons the request: nothing more comes", async () => {
    const reply = await sendToOrigin(post(), target(base, "/slow", { timeoutMs: 100 }));
    expect(reply.late).toBeUndefined();
    expect((await withLateAnswer(reply)).outcome).toBe("timeout");
  });

  it("a late answer that never comes within the bound leaves the timeout", async () => {
    const reply = await sendToOrigin(post(), target(base, "/slow", { timeoutMs: 50, lateAnswerMs: 50 }));
    const late = await withLateAnswer(reply);
    expect([late.outcome, outcomeUnknown(late)]).toEqual(["timeout", true]);
  });
});
