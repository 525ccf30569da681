/*
 * What an isolate remembers of the MCP endpoints it serves, bounded: the tools a server listed
 * as read-only or idempotent (for `trust_annotations`), the calls it has in flight (to answer a
 * client's cancel of a guarded one), and the tool names it counts under their own label.
 */
import type { RpcId } from "./jsonrpc.js";

const MAX_CALLS = 10_000;
const MAX_TOOLS = 1_000;
/** Distinct tool names counted under their own label per route; calls of any other are counted as "other". */
export const MAX_TOOL_LABELS = 64;

/** A Map kept to `max` entries, the oldest dropped first. */
function bounded<K, V>(map: Map<K, V>, key: K, value: V, max: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > max) map.delete(map.keys().next().value as K);
}

export class McpIsolate {
  /** route → tool → trusted (listed with readOnlyHint or idempotentHint). */
  private readonly annotations = new Map<string, Map<string, boolean>>();
  /** route, session and request id → whether that call is guarded. */
  private readonly calls = new Map<string, boolean>();
  private readonly labels = new Map<string, Set<string>>();

  /** Notes a server's `tools/list` result for `route`. */
  noteTools(route: string, tools: unknown): void {
    if (!Array.isArray(tools)) return;
    const known = this.annotations.get(route) ?? new Map<string, boolean>();
    this.annotations.set(route, known);
    for (const t of tools as Array<{ name?: unknown; annotations?: Record<string, unknown> }>) {
      if (typeof t?.name !== "string") continue;
      const a = t.annotations ?? {};
      bounded(known, t.name, a.readOnlyHint === true || a.idempotentHint === true, MAX_TOOLS);
    }
  }

  /** Whether the server listed `tool` of `route` as read-only or idempotent (false until it has listed it). */
  trusted(route: string, tool: string): boolean {
    return this.annotations.get(route)?.get(tool) === true;
  }

  /** A call forwarded: remembered until `done` is called, so that a cancel naming it can be placed. */
  callStarted(route: string, session: string, id: RpcId, guarded: boolean): () => void {
    const key = JSON.stringify([route, session, id]);
    bounded(this.calls, key, guarded, MAX_CALLS);
    return () => this.calls.delete(key);
  }

  /** Whether the call a cancel names is one of this isolate's guarded calls in flight (true), a passed one (false), or unknown. */
  callGuarded(route: string, session: string, id: unknown): boolean | undefined {
    if (typeof id !== "string" && typeof id !== "number") return undefined;
    return this.calls.get(JSON.stringify([route, session, id]));
  }

  /**
   * The label a call of `tool` is counted under: its name for the tools the configuration names
   * and for the first `MAX_TOOL_LABELS` others the route sees, "other" past them (a client can
   * name any tool: the figures' labels must stay bounded).
   */
  label(route: string, tool: string, named: boolean): string {
    if (named) return tool;
    const seen = this.labels.get(route) ?? new Set<string>();
    this.labels.set(route, seen);
    if (seen.has(tool) || !/^[A-Za-z0-9_.-]{1,128}$/.test(tool)) return seen.has(tool) ? tool : "other";
    if (seen.size >= MAX_TOOL_LABELS) return "other";
    seen.add(tool);
    return tool;
  }
}
