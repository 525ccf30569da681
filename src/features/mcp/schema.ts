import * as z from "zod/mini";
import { lazy } from "../../config/lazy.js";
import { duration, toolName } from "../../config/primitives.js";

/** The longest a duplicate of a call in flight may wait for its result: within the 30 s Workers give work after a response. */
export const MAX_WAIT_MS = 25_000;

/**
 * A route's `mcp` table (docs/mcp.md): the route is an MCP endpoint (Streamable HTTP), each
 * `tools/call` decided as its own request. `guard`: which calls run at most once (`"all"`, the
 * protocol's own reading of a tool without annotations, or a list); `pass`: never guarded;
 * `trust_annotations`: a tool the server lists `readOnlyHint` or `idempotentHint` is not guarded
 * either; `window`: how long a call's result is kept for its repeats; `wait`: how long a repeat of
 * a call still running waits for its result.
 */
export const mcpSettings = /* @__PURE__ */ lazy(() =>
  z.strictObject({
    guard: z._default(
      z.union([z.literal("all"), z.array(toolName())], { error: 'must be "all" or a list of tool names' }),
      "all",
    ),
    pass: z._default(z.array(toolName()), []),
    trust_annotations: z._default(z.boolean(), false),
    window: z._default(duration().check(z.refine((ms) => ms >= 1_000, "must be at least 1s")), 600_000),
    wait: z._default(
      duration().check(
        z.refine(
          (ms) => ms <= MAX_WAIT_MS,
          `must be at most ${MAX_WAIT_MS / 1000}s (what Workers allow after a response)`,
        ),
      ),
      20_000,
    ),
  }),
);

export type McpSettings = z.output<ReturnType<typeof mcpSettings>>;
