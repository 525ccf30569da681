import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { observeBody } from "./observe-body.js";
import {
  figureAt,
  figureReader,
  jsonFigures,
  parseResponseSource,
  SseFigures,
  type FigureReader,
} from "./response-figures.js";
import { loadLimits } from "../../../../test/support/limits.js";

/*
 * The readers of a cost from the response's body (docs/algorithms.md, Cost from the response): the path
 * reader, the JSON body reader with its cap, the event-stream scanner fed chunks split anywhere,
 * the body wrapper that shows them the bytes, and the configuration of the source.
 */

const bytes = (s: string) => new TextEncoder().encode(s);

/** Feeds `text` to `reader` cut at `cuts` (byte offsets, any order), then asks for the figure. */
function fed(reader: FigureReader, text: string, cuts: readonly number[] = []): number | undefined {
  const all = bytes(text);
  const at = [...new Set([0, ...cuts.map((c) => c % (all.length + 1)), all.length])].sort((a, b) => a - b);
  for (let i = 1; i < at.length; i++) reader.push(all.slice(at[i - 1], at[i]));
  return reader.figure();
}

const sse = (path: string, text: string, cuts?: readonly number[], cap?: number) =>
  fed(new SseFigures(path.split("."), cap), text, cuts);

/** An OpenAI-style stream: content chunks, a final chunk with usage, then [DONE]. */
const OPENAI =
  'data: {"id":"c1","choices":[{"delta":{"content":"Héllo"}}],"usage":null}\n\n' +
  'data: {"id":"c1","choices":[{"delta":{"content":" wörld ✓"}}],"usage":null}\n\n' +
  ": keep-alive comment\n\n" +
  'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}\n\n' +
  "data: [DONE]\n\n";

/** An Anthropic-style stream: named events, the running output total in each message_delta. */
const ANTHROPIC =
  "event: message_start\n" +
  'data: {"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}\n\n' +
  "event: content_block_delta\n" +
  'data: {"type":"content_block_delta","delta":{"text":"Hi"}}\n\n' +
  "event: message_delta\n" +
  'data: {"type":"message_delta","usage":{"output_tokens":7}}\n\n' +
  "event: message_delta\n" +
  'data: {"type":"message_delta","usage":{"output_tokens":15}}\n\n' +
  "event: message_stop\n" +
  'data: {"type":"message_stop"}\n\n';

describe("figureAt: the number at a dotted path", () => {
  const doc = { usage: { total_tokens: 42, bad: 1.5, neg: -1, str: "9" }, choices: [{ n: 3 }, { n: 4 }] };

  it.each([
    ["usage.total_tokens", 42],
    ["choices.1.n", 4],
    ["choices.0.n", 3],
    ["usage.bad", undefined],
    ["usage.neg", undefined],
    ["usage.str", undefined],
    ["usage", undefined],
    ["usage.missing", undefined],
    ["choices.2.n", undefined],
    ["choices.x", undefined],
    ["usage.total_tokens.x", undefined],
    ["usage.constructor", undefined],
    ["usage.__proto__", undefined],
  ])("%s -> %s", (path, figure) => {
    expect(figureAt(doc, path.split("."))).toBe(figure);
  });

  it("reads nothing from null, numbers past 15 digits, or a prototype's keys", () => {
    expect(figureAt(null, ["a"])).toBeUndefined();
    expect(figureAt({ a: 1e15 }, ["a"])).toBeUndefined();
    expect(figureAt({ a: 999_999_999_999_999 }, ["a"])).toBe(999_999_999_999_999);
    expect(figureAt({}, ["toString"])).toBeUndefined();
  });
});

describe("jsonFigures: a JSON body's figure, read once it has ended", () => {
  const body = JSON.stringify({ id: "x", text: "naïve ✓".repeat(10), usage: { total_tokens: 321 } });
  const path = ["usage", "total_tokens"];

  it("reads the figure whatever the chunks (a multi-byte character split included)", () => {
    fc.assert(
      fc.property(fc.array(fc.nat(), { maxLength: 12 }), (cuts) => {
        expect(fed(jsonFigures(path), body, cuts)).toBe(321);
      }),
    );
  });

  it("reads nothing from a body cut short, not JSON, or without the field", () => {
    expect(fed(jsonFigures(path), body.slice(0, -3))).toBeUndefined();
    expect(fed(jsonFigures(path), "<html>oops</html>")).toBeUndefined();
    expect(fed(jsonFigures(path), '{"usage":{}}')).toBeUndefined();
    expect(fed(jsonFigures(path), "")).toBeUndefined();
  });

  it("reads nothing past the cap, even when the rest would have parsed", () => {
    const size = bytes(body).length;
    expect(fed(jsonFigures(path, size), body, [7, 30])).toBe(321);
    expect(fed(jsonFigures(path, size - 1), body, [7, 30])).toBeUndefined();
  });
});

describe("SseFigures: the last figure in a text/event-stream", () => {
  it("reads OpenAI's final usage chunk and Anthropic's last message_delta, chunks split anywhere", () => {
    fc.assert(
      fc.property(fc.array(fc.nat(), { maxLength: 20 }), (cuts) => {
        expect(sse("usage.total_tokens", OPENAI, cuts)).toBe(42);
        expect(sse("usage.output_tokens", ANTHROPIC, cuts)).toBe(15);
      }),
    );
  });

  it("reads CRLF and CR line ends alike, a CRLF split between two chunks included", () => {
    for (const eol of ["\r\n", "\r"]) {
      const text = OPENAI.replaceAll("\n", eol);
      fc.assert(
        fc.property(fc.array(fc.nat(), { maxLength: 20 }), (cuts) => sse("usage.total_tokens", text, cuts) === 42),
      );
    }
    // a CR ending one chunk and the LF opening the next end one line, not two (which would end the event early)
    const split = 'data: {"usage":\r\ndata: {"total_tokens":5}}\r\n\r\n';
    expect(sse("usage.total_tokens", split, [split.indexOf("\n")])).toBe(5);
  });

  it("the last figure wins; an event without the field, bad JSON and [DONE] leave it be", () => {
    const text =
      'data: {"usage":{"total_tokens":3}}\n\n' +
      'data: {"usage":{"total_tokens":9}}\n\n' +
      'data: {"usage":{"total_tokens":\n\n' +
      "data: not json\n\n" +
      'data: {"usage":null}\n\n' +
      'data: {"usage":{"total_tokens":-4}}\n\n' +
      "data: [DONE]\n\n";
    expect(sse("usage.total_tokens", text)).toBe(9);
  });

  it("joins an event's data lines, skips other fields and comments, reads `data` without a space", () => {
    const text = 'id: 1\nevent: x\ndata: {"usage":\ndata:{"total_tokens":11}}\nretry: 5\n: note\n\n';
    expect(sse("usage.total_tokens", text)).toBe(11);
    // `data` alone is an empty data line: the event is joined as {"a":\n1}
    expect(sse("a", 'data:{"a":\ndata\ndata:1}\n\n')).toBe(1);
    // a field only starting with "data" is another field
    expect(sse("a", 'database: {"a":1}\n\n')).toBeUndefined();
  });

  it("reads an event left open when the stream ends, and nothing from an empty stream", () => {
    expect(sse("a", 'data: {"a":4}')).toBe(4);
    expect(sse("a", 'data: {"a":4}\n')).toBe(4);
    expect(sse("a", "")).toBeUndefined();
  });

  it("skips an event past the cap (however it is cut), and reads the next one", () => {
    const big = `data: {"a":1,"pad":"${"x".repeat(200)}"}\n\n`;
    const text = big + 'data: {"a":2}\n\n' + big;
    fc.assert(fc.property(fc.array(fc.nat(), { maxLength: 10 }), (cuts) => sse("a", text, cuts, 100) === 2));
    // an event of many short lines over the cap is skipped as well
    const many = `data: {"a":7,\n${'data: "p":"xxxxxxxxxx",\n'.repeat(20)}data: "z":0}\n\n`;
    expect(sse("a", many, [], 10_000)).toBe(7);
    expect(sse("a", many, [], 100)).toBeUndefined();
    expect(sse("a", `${many}data: {"a":8}\n\n`, [], 100)).toBe(8);
  });

  it("figureReader scans an event stream, and reads any other response of an sse: source as one JSON body", () => {
    const source = { from: "sse", path: ["usage", "total_tokens"] } as const;
    const stream = figureReader(source, new Headers({ "content-type": "text/event-stream; charset=utf-8" }));
    expect(stream && fed(stream, OPENAI)).toBe(42);
    const json = figureReader(source, new Headers({ "content-type": "application/json" }));
    expect(json && fed(json, '{"usage":{"total_tokens":77}}')).toBe(77);
    expect(figureReader({ from: "header", header: "x" }, new Headers())).toBeUndefined();
  });
});

describe("observeBody: one wrapper for the slots' release and the body's figure", () => {
  it("hands every byte on unchanged, shows each chunk to the observer first, ends once", async () => {
    const chunks = ['data: {"usage":{"total', '_tokens":6}}\n', "\n"];
    const source = new ReadableStream<Uint8Array>({
      start(c) {
        for (const ch of chunks) c.enqueue(bytes(ch));
        c.close();
      },
    });
    const reader = new SseFigures(["usage", "total_tokens"]);
    let ends = 0;
    const text = await new Response(
      observeBody(source, { onChunk: (ch) => reader.push(ch), onEnd: () => ends++ }),
    ).text();
    expect(text).toBe(chunks.join(""));
    expect([ends, reader.figure()]).toEqual([1, 6]);
  });

  it("a throwing observer never breaks the delivery", async () => {
    const source = new Response("abc").body as ReadableStream<Uint8Array>;
    const body = observeBody(source, {
      onChunk: () => {
        throw new Error("reader bug");
      },
      onEnd: () => {
        throw new Error("end bug");
      },
    });
    expect(await new Response(body).text()).toBe("abc");
  });
});

describe("cost = { response = ... } in the configuration", () => {
  const errorOf = (response: string) => {
    const r = loadLimits([{ rate: 1000, period: "1m", cost: { response, reserve: 10, max: 100 } }]);
    return r.ok ? "ok" : r.error.message;
  };

  it("compiles header, json and sse sources", () => {
    expect(parseResponseSource("header:X-Usage")).toEqual({ from: "header", header: "x-usage" });
    expect(parseResponseSource("json:usage.total_tokens")).toEqual({ from: "json", path: ["usage", "total_tokens"] });
    expect(parseResponseSource("sse:choices.0.n")).toEqual({ from: "sse", path: ["choices", "0", "n"] });
    const r = loadLimits([
      { rate: 1000, period: "1m", cost: { response: "sse:usage.total_tokens", reserve: 10, max: 100 } },
    ]);
    if (!r.ok) throw r.error;
    expect(r.config.routes[0]!.limits[0]).toMatchObject({
      cost: 10,
      responseCost: { from: "sse", path: ["usage", "total_tokens"], max: 100 },
      lease: false,
    });
  });

  it("refuses trailer: by name, saying a Worker cannot read trailers", () => {
    expect(errorOf("trailer:x-usage-tokens")).toMatch(
      /^SLUICE\.routes\[0\] \("r"\)\.limits\[0\] \("l0"\)\.cost\.response: cannot be a trailer: a Worker's fetch\(\) does not expose HTTP trailers/,
    );
  });

  it.each([
    "json:",
    "json:usage..total",
    "json:.usage",
    "sse:usage.",
    "sse:a b",
    "body:usage",
    "usage",
    "header:",
    "json:a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q",
  ])("refuses a bad source %j, naming the field", (response) => {
    expect(errorOf(response)).toMatch(
      /^SLUICE\.routes\[0\] \("r"\)\.limits\[0\] \("l0"\)\.cost\.response: must be "header:<name>", "json:<path>" or "sse:<path>"/,
    );
  });
});
