/**
 * The log module: one JSON line per event, `event` first; deferred work that fails is logged with
 * what failed and never rejects; a dropped body's cancel failure is not a failure.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { discardBody, log, logError, logFailure, orElse, redact, settleQuietly } from "./log.js";

function lines(spy: { mock: { calls: unknown[][] } }): Record<string, unknown>[] {
  return spy.mock.calls.map((args) => {
    expect(args).toHaveLength(1);
    return JSON.parse(args[0] as string) as Record<string, unknown>;
  });
}

describe("log lines", () => {
  afterEach(() => vi.restoreAllMocks());

  it("writes one JSON object per event, the event first, to standard output", () => {
    const out = vi.spyOn(console, "log").mockImplementation(() => undefined);
    log("ban", { route: "api", level: 2 });
    expect(out.mock.calls[0]?.[0]).toBe('{"event":"ban","route":"api","level":2}');
  });

  it("writes failures to standard error, the error's message last", () => {
    const err = vi.spyOn(console, "error").mockImplementation(() => undefined);
    logError("queue_error", new Error("redis down"), { job: "j1" });
    logError("odd", "a string thrown");
    logFailure("lists_jwt_unverifiable", { detail: "no key" });
    expect(err.mock.calls[0]?.[0]).toBe('{"event":"queue_error","job":"j1","message":"redis down"}');
    expect(lines(err).slice(1)).toEqual([
      { event: "odd", message: "a string thrown" },
      { event: "lists_jwt_unverifiable", detail: "no key" },
    ]);
  });
});

describe("no secret in a log line (issue 30, point 4)", () => {
  afterEach(() => vi.restoreAllMocks());

  it.each([
    [
      "Fetch API cannot load: rediss://default:abc@eu1-x.upstash.io:6379",
      "Fetch API cannot load: rediss://***@eu1-x.upstash.io:6379",
    ],
    ["https://user:p%40ss@host.example/x", "https://***@host.example/x"],
    ["GET https://x.upstash.io/get/k?_token=s3cret&n=1 failed", "GET https://x.upstash.io/get/k?_token=***&n=1 failed"],
    ["https://h.example/?a=1&api_key=k3y#f", "https://h.example/?a=1&api_key=***#f"],
    ["authorization: Bearer eyJhbGciOi.eyJzdWIi.c2ln", "authorization: Bearer ***"],
    ["no answer from Redis within 50 ms", "no answer from Redis within 50 ms"],
    ["mail ops@example.com, a=b", "mail ops@example.com, a=b"],
  ])("redacts %j", (text, redacted) => {
    expect(redact(text)).toBe(redacted);
  });

  it("every line, of every kind, nested fields included, is written redacted", () => {
    const out = vi.spyOn(console, "log").mockImplementation(() => undefined);
    const err = vi.spyOn(console, "error").mockImplementation(() => undefined);
    log("x", { url: "redis://u:pw1@h:6379" });
    logFailure("y", { nested: { url: "https://h/?token=pw2" } });
    logError("z", new TypeError("Fetch API cannot load: rediss://default:pw3@h:6379"));
    const written = [...out.mock.calls, ...err.mock.calls].map((c) => String(c[0])).join("\n");
    for (const secret of ["pw1", "pw2", "pw3"]) expect(written).not.toContain(secret);
    expect(written).toContain("redis://***@h:6379");
  });
});

describe("deferred work", () => {
  afterEach(() => vi.restoreAllMocks());

  it("settleQuietly resolves either way and logs what failed", async () => {
    const err = vi.spyOn(console, "error").mockImplementation(() => undefined);
    await expect(settleQuietly(Promise.resolve(7), "refund_failed")).resolves.toBeUndefined();
    expect(err).not.toHaveBeenCalled();
    await expect(
      settleQuietly(Promise.reject(new Error("timeout")), "refund_failed", { route: "api" }),
    ).resolves.toBeUndefined();
    expect(lines(err)).toEqual([{ event: "refund_failed", route: "api", message: "timeout" }]);
  });

  it("orElse answers the fallback on failure, logged, and the value otherwise", async () => {
    const err = vi.spyOn(console, "error").mockImplementation(() => undefined);
    await expect(orElse(Promise.resolve("job"), null, "job_status_read_failed")).resolves.toBe("job");
    await expect(orElse(Promise.reject(new Error("gone")), null, "job_status_read_failed")).resolves.toBeNull();
    expect(lines(err)).toEqual([{ event: "job_status_read_failed", message: "gone" }]);
  });

  it("discardBody cancels the stream, and a cancel that fails is not an error", async () => {
    let cancelled = false;
    await discardBody(new ReadableStream({ cancel: () => void (cancelled = true) }));
    expect(cancelled).toBe(true);
    const broken = new ReadableStream({
      cancel: () => {
        throw new Error("already errored");
      },
    });
    await expect(discardBody(broken)).resolves.toBeUndefined();
    await expect(discardBody(null)).resolves.toBeUndefined();
  });
});
