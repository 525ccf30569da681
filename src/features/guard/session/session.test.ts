import { Hono, type Context } from "hono";
import { describe, expect, it } from "vitest";
import { countedApp, gate, middlewareRig, type Gate } from "../../../../test/support/middleware-rig.js";
import { session, type SessionOptions, type SluiceEnv } from "../../../index.js";

/** session() in an app of its own, in Node, against a real Redis behind the Upstash-REST bridge. */
const rig = middlewareRig("ses");
const options = (extra: Partial<SessionOptions> = {}): SessionOptions =>
  rig.options({ key: "header:x-session-id", ...extra });

/** POST /tool: waits at the gate (when given one), then answers with its fencing token. */
function toolApp(opts: SessionOptions, g?: Gate) {
  return countedApp(
    session(opts),
    async (c) => {
      await g?.wait();
      return c.json({ fence: c.get("sluice").fencingToken });
    },
    { path: "/tool", method: "POST" },
  );
}

const call = (sessionId: string | undefined, ip = "198.51.100.30"): RequestInit => ({
  method: "POST",
  headers: { "CF-Connecting-IP": ip, ...(sessionId === undefined ? {} : { "x-session-id": sessionId }) },
});
const fenceOf = async (res: Response) => Number(((await res.json()) as { fence?: string }).fence);

describe("session()", () => {
  it("refuses a second concurrent call of one session with 409 Session busy", async () => {
    const g = gate();
    const { app, calls } = toolApp(options(), g);
    const first = app.request("/tool", call("s-1"));
    await g.reached(1);
    const second = await app.request("/tool", call("s-1"));
    expect(second.status).toBe(409);
    expect(second.headers.get("content-type")).toBe("application/problem+json");
    expect(Number(second.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
    expect(second.headers.get("Sluice-Decision")).toBe("reject");
    const body = (await second.json()) as { type: string; title: string };
    expect(body.title).toBe("Session busy");
    expect(body.type).toBe("/__sluice/problems/session-busy");
    g.open();
    const done = await first;
    expect(done.status).toBe(200);
    expect(await fenceOf(done)).toBeGreaterThan(0);
    expect(calls.n).toBe(1);
  });

  it("lets sequential calls of one session through, with rising fencing tokens", async () => {
    const { app, calls } = toolApp(options());
    const fences: number[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await app.request("/tool", call("s-2"));
      expect(res.status).toBe(200);
      expect(res.headers.get("Sluice-Decision")).toBe("allow");
      fences.push(await fenceOf(res));
    }
    expect(fences.every((f) => Number.isInteger(f) && f > 0)).toBe(true);
    expect(fences[1]).toBeGreaterThan(fences[0] ?? Infinity);
    expect(fences[2]).toBeGreaterThan(fences[1] ?? Infinity);
    expect(calls.n).toBe(3);
  });

  it("runs calls of different sessions in parallel", async () => {
    const g = gate();
    const { app, calls } = toolApp(options(), g);
    const a = app.request("/tool", call("s-a"));
    const b = app.request("/tool", call("s-b"));
    // both are inside the handler at once: neither waited for the other's lock (nor was refused)
    await Promise.race([g.reached(2), a, b]);
    expect(calls.n).toBe(2);
    g.open();
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra.status).toBe(200);
    expect(rb.status).toBe(200);
  });

  it("gives another principal (client IP) that knows the session id a lock of its own", async () => {
    const g = gate();
    const { app, calls } = toolApp(options(), g);
    const owner = app.request("/tool", call("s-shared", "198.51.100.31"));
    await g.reached(1);
    const other = app.request("/tool", call("s-shared", "198.51.100.32"));
    await Promise.race([g.reached(2), other]);
    expect(calls.n).toBe(2);
    g.open();
    expect((await owner).status).toBe(200);
    expect((await other).status).toBe(200);
  });

  it("takes the principal from a function of the context: one lock per user, by hash", async () => {
    const g = gate();
    const opts = options({ principal: (c: Context) => c.get("user") as string | undefined });
    // the app's own auth names the user; both users come from one address with one session id
    const app = new Hono<SluiceEnv>();
    let calls = 0;
    app.use("/tool", async (c, next) => {
      c.set("user" as never, c.req.header("x-user-token")?.replace("token-", "user-") as never);
      await next();
    });
    app.use("/tool", session(opts));
    app.post("/tool", async (c) => {
      calls++;
      await g.wait();
      return c.text("ok");
    });
    const as = (token: string): RequestInit => {
      const init = call("s-users");
      return { ...init, headers: { ...(init.headers as Record<string, string>), "x-user-token": token } };
    };
    const ann = app.request("/tool", as("token-ann"));
    await g.reached(1);
    const bob = app.request("/tool", as("token-bob"));
    await Promise.race([g.reached(2), bob]);
    expect(calls).toBe(2);
    // the same user's second call meets its own lock
    expect((await app.request("/tool", as("token-ann"))).status).toBe(409);
    const keys = (await rig.db.redis.keys(`${opts.key_prefix}:session:*`)) as string[];
    expect(keys.filter((k) => !k.endsWith(":fence")).length).toBe(2);
    expect(keys.join(" ")).not.toMatch(/user-|token-/);
    g.open();
    expect((await ann).status).toBe(200);
    expect((await bob).status).toBe(200);
  });

  it("frees the lock after the response, also when the handler fails", async () => {
    const { app, calls } = countedApp(
      session(options()),
      (c, n) => {
        if (n === 1) throw new Error("tool crashed");
        return c.text("ok");
      },
      { path: "/tool", method: "POST" },
    );
    app.onError((_e, c) => c.text("tool failed", 500));
    expect((await app.request("/tool", call("s-3"))).status).toBe(500);
    expect((await app.request("/tool", call("s-3"))).status).toBe(200);
    expect(calls.n).toBe(2);
  });

  it("lets a call without a session identity through without a lock", async () => {
    const { app, calls } = toolApp(options());
    const res = await app.request("/tool", call(undefined));
    expect(res.status).toBe(200);
    expect(((await res.json()) as { fence?: string }).fence).toBeUndefined();
    expect(calls.n).toBe(1);
  });
});
