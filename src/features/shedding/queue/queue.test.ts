import { describe, expect, it } from "vitest";
import { loadConfig, type Route } from "../../../config/index.js";
import { toJob } from "./queue.js";

function route(extra: Record<string, unknown>): Route {
  const loaded = loadConfig({
    ORIGIN_URL: "http://origin.test",
    SLUICE: { routes: [{ name: "jobs", match: "/jobs", on_limit: "queue", ...extra }] },
  });
  if (!loaded.ok) throw loaded.error;
  return loaded.config.routes[0] as Route;
}

describe("a queued job keeps what its delivery is decided with", () => {
  const request = () =>
    new Request("https://sluice.test/jobs?x=1", {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-priority": "critical",
        "x-api-key": "k1",
        "x-other": "dropped",
      },
      body: "{}",
    });
  const facts = (r: Request) => ({ ip: "203.0.113.9", matchPath: "/jobs", headers: r.headers, url: new URL(r.url) });

  it("the headers its limits key on and its priority's header, nothing else beyond queue.headers", async () => {
    const r = request();
    const job = await toJob(
      r,
      route({ priority: "header:x-priority", limits: [{ name: "k", key: "header:x-api-key", rate: 1, period: "1s" }] }),
      facts(r),
      "home",
      "/jobs",
    );
    expect(Object.fromEntries(job.headers)).toEqual({
      "content-type": "application/json",
      "x-priority": "critical",
      "x-api-key": "k1",
    });
  });

  it("a priority named in the route keeps no header", async () => {
    const r = request();
    const job = await toJob(r, route({ priority: "critical" }), facts(r), "home", "/jobs");
    expect(Object.fromEntries(job.headers)).toEqual({ "content-type": "application/json" });
  });
});
