import { createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { encodeCommand, replyToJs, RespClient, RespError, RespParser, type RespReply } from "./resp.js";

describe("encodeCommand", () => {
  it("writes an array of bulk strings, byte lengths included", () => {
    const wire = encodeCommand(["SET", "k€", Buffer.from([0, 255]), 42]);
    expect(
      wire.equals(
        Buffer.concat([
          Buffer.from("*4\r\n$3\r\nSET\r\n$4\r\nk€\r\n$2\r\n"),
          Buffer.from([0, 255]),
          Buffer.from("\r\n$2\r\n42\r\n"),
        ]),
      ),
    ).toBe(true);
  });
});

describe("RespParser", () => {
  const wire = Buffer.from(
    "+OK\r\n-ERR boom\r\n:-12\r\n$-1\r\n*-1\r\n$5\r\na\r\nbc\r\n*3\r\n:1\r\n*2\r\n$1\r\nx\r\n$-1\r\n+QUEUED\r\n*0\r\n$0\r\n\r\n",
  );
  const expected = ["OK", { error: "ERR boom" }, -12, null, null, "a\r\nbc", [1, ["x", null], "QUEUED"], [], ""];

  it("parses statuses, errors, integers, nils, bulk strings with CRLF inside and nested arrays", () => {
    const replies = new RespParser().push(wire);
    expect(replies.map(replyToJs)).toEqual(expected);
    expect(replies[1]).toBeInstanceOf(RespError);
    expect(Buffer.isBuffer(replies[5])).toBe(true);
  });

  it("gives the same replies however the bytes are split", () => {
    for (let cut = 1; cut < wire.length; cut++) {
      const parser = new RespParser();
      const replies = [...parser.push(wire.subarray(0, cut)), ...parser.push(wire.subarray(cut))];
      expect(replies.map(replyToJs)).toEqual(expected);
    }
    const parser = new RespParser();
    const oneByteAtATime: RespReply[] = [];
    for (let i = 0; i < wire.length; i++) oneByteAtATime.push(...parser.push(wire.subarray(i, i + 1)));
    expect(oneByteAtATime.map(replyToJs)).toEqual(expected);
  });

  it("keeps bulk strings binary-safe", () => {
    const [reply] = new RespParser().push(
      Buffer.concat([Buffer.from("$3\r\n"), Buffer.from([0xff, 0x00, 0x0a]), Buffer.from("\r\n")]),
    );
    expect(Buffer.isBuffer(reply) && [...reply]).toEqual([0xff, 0x00, 0x0a]);
  });

  it("waits on a partial reply and rejects an unknown type byte", () => {
    expect(new RespParser().push(Buffer.from("*2\r\n:1\r\n"))).toEqual([]);
    expect(() => new RespParser().push(Buffer.from("?what\r\n"))).toThrow(/protocol error/);
  });
});

/** A fake Redis: `onCommand` sees every chunk the client writes and answers as it likes. */
async function fakeRedis(onCommand: (socket: Socket, data: Buffer) => void): Promise<{ server: Server; port: number }> {
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on("data", (data) => onCommand(socket, data));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as AddressInfo).port };
}
const sockets = new Set<Socket>();

describe("RespClient", () => {
  let server: Server | undefined;
  afterEach(async () => {
    for (const socket of sockets) socket.destroy();
    sockets.clear();
    await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  });

  it("pipelines commands in one write and matches split replies to them in order", async () => {
    const writes: Buffer[] = [];
    const fake = await fakeRedis((socket, data) => {
      writes.push(data);
      // Answer in awkward pieces to exercise the FIFO across packet boundaries.
      socket.write("+O");
      setTimeout(() => socket.write("K\r\n:7\r\n$3\r\nab"), 5);
      setTimeout(() => socket.write("c\r\n-ERR no\r\n"), 10);
    });
    server = fake.server;
    const client = new RespClient({ port: fake.port });
    const replies = await client.sendMany([["SET", "k", "v"], ["INCR", "n"], ["GET", "k"], ["BAD"]]);
    expect(replies.map(replyToJs)).toEqual(["OK", 7, "abc", { error: "ERR no" }]);
    expect(writes).toHaveLength(1);
    expect(writes[0]?.toString()).toBe(
      Buffer.concat([
        encodeCommand(["SET", "k", "v"]),
        encodeCommand(["INCR", "n"]),
        encodeCommand(["GET", "k"]),
        encodeCommand(["BAD"]),
      ]).toString(),
    );
    client.close();
  });

  it("fails pending commands when the connection drops, then reconnects on the next command", async () => {
    let commands = 0;
    let connections = 0;
    const fake = await fakeRedis((socket) => {
      commands++;
      if (commands === 1) socket.destroy();
      else socket.write("+PONG\r\n");
    });
    server = fake.server;
    server.on("connection", () => connections++);
    const client = new RespClient({ port: fake.port });
    await expect(client.send(["PING"])).rejects.toThrow(/connection closed|ECONNRESET/);
    expect(replyToJs(await client.send(["PING"]))).toBe("PONG");
    expect(connections).toBe(2);
    client.close();
  });

  it("drops a connection that stops answering instead of hanging", async () => {
    const fake = await fakeRedis(() => undefined);
    server = fake.server;
    const client = new RespClient({ port: fake.port, timeoutMs: 100 });
    await expect(client.send(["PING"])).rejects.toThrow(/did not answer/);
    client.close();
  });

  it("rejects with a clear error when nothing listens", async () => {
    const fake = await fakeRedis(() => undefined);
    const { port } = fake;
    await new Promise((resolve) => fake.server.close(resolve));
    const client = new RespClient({ port });
    await expect(client.send(["PING"])).rejects.toThrow(/ECONNREFUSED/);
    client.close();
  });
});
