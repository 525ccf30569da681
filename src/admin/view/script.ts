/**
 * The dashboard's only script, inlined in the page (no CDN, nothing else to load). The panels are
 * rendered on the server; this swaps in `GET /__sluice/fragments/panels` every 3 seconds while the
 * tab is visible, and sends the page's actions (ban, lift, override, deny, route mode, sign out) to the admin
 * API as JSON, which is what the session cookie may change things with. A ban from a row is
 * confirmed first, with what the entry denies (the server's words, `data-confirm`) and the request. It never builds HTML: what it
 * inserts is the server's, escaped there.
 */
export const PAGE_SCRIPT = `(() => {
  const base = "/__sluice", panels = document.getElementById("panels"), status = document.getElementById("status");
  let refreshes = 0;
  const say = (text, bad) => { status.textContent = text; status.className = bad ? "bad" : "ok"; };
  async function refresh() {
    const r = await fetch(base + "/fragments/panels", { credentials: "same-origin", cache: "no-store" });
    if (r.status === 401) return location.reload();
    if (!r.ok) return say("refresh failed: " + r.status, true);
    panels.innerHTML = await r.text();
    document.body.dataset.refreshed = String(++refreshes);
  }
  async function send(path, method, body, done) {
    const r = await fetch(base + path, { method, credentials: "same-origin",
      headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const answer = await r.json().catch(() => ({}));
    say(r.ok ? done : (answer.detail || "failed: " + r.status), !r.ok);
    await refresh();
  }
  document.addEventListener("click", (e) => {
    const b = e.target instanceof Element ? e.target.closest("button[data-action]") : null;
    if (!b) return;
    const { action, entry, kind, route } = b.dataset, ttlSelect = document.getElementById("ban-ttl"), ttl = ttlSelect.value;
    if (action === "ban") {
      // the operator reads what the entry denies (a range says so) and the exact request before it is sent
      const body = { kind: "deny", entry, ttl, note: "banned from the dashboard" };
      const question = b.dataset.confirm + "\\n\\nFor " + ttlSelect.selectedOptions[0].text + ". Written: PUT " + base + "/lists " + JSON.stringify(body);
      if (!confirm(question)) return say("ban of " + entry + " cancelled");
      send("/lists", "PUT", body, "banned " + entry);
    }
    if (action === "lift") send("/lists", "DELETE", { kind, entry }, "lifted " + entry);
    if (action === "normal") send("/routes/" + encodeURIComponent(route) + "/mode", "PUT", { mode: "normal" }, route + " back to normal");
  });
  const onSubmit = (id, handle) => document.getElementById(id).addEventListener("submit", (e) => {
    e.preventDefault();
    handle(new FormData(e.target));
  });
  onSubmit("override-form", (f) => {
    const [route, limit] = String(f.get("target")).split("/"), ip = f.get("ip");
    send("/overrides", "PUT", { route, limit, rate: Number(f.get("rate")), ttl: f.get("ttl"), ...(ip ? { identity: { ip } } : {}) },
      "override set on " + route + " / " + limit);
  });
  onSubmit("mode-form", (f) => {
    const route = String(f.get("route")), mode = f.get("mode"), note = f.get("note");
    send("/routes/" + encodeURIComponent(route) + "/mode", "PUT",
      { mode, ...(mode === "normal" ? {} : { ttl: f.get("ttl") }), ...(note ? { note } : {}) }, route + " switched to " + mode);
  });
  onSubmit("deny-form", (f) => send("/lists", "PUT", { kind: "deny", entry: f.get("entry"), ttl: f.get("ttl") }, "denied " + f.get("entry")));
  document.getElementById("sign-out").addEventListener("click", async () => {
    const r = await fetch(base + "/logout", { method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json" }, body: "{}" });
    if (!r.ok) return say("sign-out failed: " + r.status, true);
    location.assign(base + "/");
  });
  setInterval(() => { if (!document.hidden) refresh().catch(() => say("refresh failed", true)); }, 3000);
  document.body.dataset.loaded = "yes";
})();`;
