import { Hono } from "hono";
import { z } from "zod";
import type { Config } from "../../../config/index.js";
import { parseDuration } from "../../../config/duration.js";
import type { Stores } from "../../../region/index.js";
import { adminHandlers, required, requireServed, type AdminEnv } from "../../../operator/context.js";
import { adminActor, ledgerAdminAction } from "../../../operator/ledger.js";
import { badRequest, duration, jsonBody } from "../../../operator/validate.js";
import { PROBLEMS } from "../../../problem-types.js";
import { announce, readEntriesAt, removeField, writeField } from "../lists-store.js";
import { APPLIED, rereadHere, type ListsCopy } from "../admin.js";
import { FORCED_MODES, modeField, modeInForce, type RouteMode } from "./store.js";

const modeBody = z
  .object({
    mode: z.enum([...FORCED_MODES, "normal"]),
    // required to force a mode: a switch nobody set an end to would outlive the incident
    ttl: duration.optional(),
    note: z.string().max(200).optional(),
  })
  .strict()
  .refine((b) => b.mode === "normal" || b.ttl !== undefined, { message: "is required", path: ["ttl"] });

const setMode = (lists: ListsCopy) =>
  adminHandlers.createHandlers(jsonBody(modeBody), async (c) => {
    const b = c.req.valid("json");
    const config = c.get("config");
    const name = c.req.param("name") ?? "";
    const route = config.routes.find((r) => r.name === name);
    if (!route) throw badRequest(`route: no route named "${name}"`);
    // a mode no middleware applies would answer ok and change nothing; going back to normal always works
    if (b.mode !== "normal") requireServed(c, name, "modes");
    if (b.mode === "divert" && !route.divertUrl) throw badRequest(`mode: route "${name}" has no divert_url`);
    const home = required(c.get("stores").offPath(), PROBLEMS.storeUnavailable, "no Redis for the home region");
    if (b.mode === "normal") {
      const removed = await removeField(home, config.key_prefix, modeField(name));
      await rereadHere(lists, config.key_prefix, home);
      await announce(config, c.get("stores"), home);
      await ledgerAdminAction(c, "admin_route_mode", { route: name, mode: "normal", removed, note: b.note });
      return c.json({ ok: true, route: name, mode: "normal" });
    }
    const set: RouteMode = {
      kind: "mode",
      route: name,
      mode: b.mode,
      until: Date.now() + (parseDuration(b.ttl ?? "") as number),
      by: await adminActor(c),
      ...(b.note ? { note: b.note } : {}),
    };
    await writeField(home, config.key_prefix, modeField(name), set);
    await rereadHere(lists, config.key_prefix, home);
    await announce(config, c.get("stores"), home);
    await ledgerAdminAction(c, "admin_route_mode", {
      route: name,
      mode: b.mode,
      ttl: b.ttl,
      until: set.until,
      note: b.note,
    });
    return c.json({
      ok: true,
      ...modeRow(set),
      applied: APPLIED,
    });
  });

/** A route as `GET /__sluice/routes` shows it: its name, and its degrade switch while one is in force. */
export interface RouteRow {
  name: string;
  mode: RouteMode["mode"] | "normal";
  expires_at?: string;
  note?: string;
  by?: string;
}

function modeRow(m: RouteMode): RouteRow {
  return { name: m.route, mode: m.mode, expires_at: new Date(m.until).toISOString(), note: m.note, by: m.by };
}

/** Every configured route with the switch in force for it (`normal` when none), as the API and the dashboard show them. */
export async function routeModes(config: Config, stores: Stores): Promise<RouteRow[]> {
  const home = stores.offPath();
  const modes = home ? (await readEntriesAt(home, config.key_prefix)).modes : [];
  const now = Date.now();
  return config.routes.map((r) => {
    const m = modeInForce(modes, r.name, now);
    return m ? modeRow(m) : { name: r.name, mode: "normal" };
  });
}

const listModes = adminHandlers.createHandlers(async (c) =>
  c.json({ routes: await routeModes(c.get("config"), c.get("stores")) }),
);

/**
 * `/__sluice/routes`: `GET` lists the routes and their degrade switches; `PUT /{name}/mode` sets
 * one (`fallback`, `reject`, `divert`, `open`) until its `ttl`, or removes it (`normal`). The
 * switch is a field of the access lists' hash: the write is read back into `lists`, this
 * isolate's copy, before the answer, and bumps every Redis's change counter, so another isolate
 * applies it once a decision of its has reported the change.
 */
export function routesApp(lists: ListsCopy): Hono<AdminEnv> {
  return new Hono<AdminEnv>().get("/", ...listModes).put("/:name/mode", ...setMode(lists));
}
