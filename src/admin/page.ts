/**
 * The dashboard: one page, no build step. It reads `/__sluice/api/dashboard` and the other admin
 * routes with the session cookie, draws each route's last hour as an SVG chart, and posts
 * overrides and deny entries back as JSON.
 */
export const LOGIN_PAGE = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>sluice · sign in</title>
<style>body{font:15px system-ui,sans-serif;background:#0f172a;color:#e2e8f0;display:grid;place-items:center;height:100vh;margin:0}
form{background:#1e293b;padding:2rem;border-radius:8px;display:grid;gap:.8rem;min-width:20rem}input,button{font:inherit;padding:.5rem;border-radius:4px;border:1px solid #475569}
button{background:#0ea5e9;color:#fff;border:0;cursor:pointer}</style></head><body>
<form method="post" action="/__sluice/login"><h1>sluice</h1><label>Admin token <input type="password" name="token" autocomplete="current-password" required></label><button type="submit">Sign in</button></form>
</body></html>`;

export const DASHBOARD_PAGE = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>sluice · dashboard</title>
<style>
body{font:14px system-ui,sans-serif;background:#0f172a;color:#e2e8f0;margin:0;padding:1.5rem}
h1{margin:0 0 1rem}h2{font-size:1rem;margin:1.5rem 0 .5rem;color:#94a3b8}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:1rem}
.card{background:#1e293b;border-radius:8px;padding:1rem}
.legend span{display:inline-block;width:.8rem;height:.8rem;margin:0 .3rem 0 1rem;vertical-align:middle}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #334155}
.ok{color:#4ade80}.bad{color:#f87171}form{display:flex;flex-wrap:wrap;gap:.4rem;align-items:center}
input,select,button{font:inherit;padding:.35rem;border-radius:4px;border:1px solid #475569;background:#0f172a;color:#e2e8f0}
button{background:#0ea5e9;border:0;color:#fff;cursor:pointer}.figure{font-size:1.6rem;font-weight:600}
</style></head><body>
<h1>sluice</h1>
<div class="grid" id="summary"></div>
<h2>Allowed vs shed, last 60 minutes <span class="legend"><span style="background:#4ade80"></span>allowed<span style="background:#f87171"></span>shed</span></h2>
<div class="grid" id="charts"></div>
<div class="grid">
<div class="card"><h2>Top blocked identifiers (hashed)</h2><table id="blocked"></table></div>
<div class="card"><h2>Region health</h2><table id="health"></table></div>
<div class="card"><h2>Overrides</h2><table id="overrides"></table>
<form id="override-form"><select name="target" id="limits"></select><input name="rate" type="number" min="1" placeholder="rate" required><input name="ttl" value="10m" size="4"><input name="ip" placeholder="client IP (all if empty)"><button>Add override</button></form></div>
<div class="card"><h2>Deny and allow lists</h2><table id="lists"></table>
<form id="deny-form"><input name="entry" placeholder="IP, CIDR or header:x-api-key=…" required><input name="ttl" value="1h" size="4"><button>Deny</button></form></div>
</div>
<script>
const api = (path, init) => fetch('/__sluice' + path, { credentials: 'same-origin', ...init }).then(r => r.ok ? r.json() : Promise.reject(r.status));
const send = (path, method, body) => api(path, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const esc = s => String(s).replace(/[&<>"]/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
function chart(r) {
  const w = 420, h = 120, n = r.allowed.length, bw = w / n, max = Math.max(1, ...r.allowed.map((a, i) => a + r.shed[i]));
  const bars = r.allowed.map((a, i) => {
    const ha = a / max * (h - 10), hs = r.shed[i] / max * (h - 10), x = i * bw;
    return '<rect class="bar-allowed" x="' + x + '" y="' + (h - ha) + '" width="' + (bw - 1) + '" height="' + ha + '" fill="#4ade80"/>' +
      '<rect class="bar-shed" x="' + x + '" y="' + (h - ha - hs) + '" width="' + (bw - 1) + '" height="' + hs + '" fill="#f87171"/>';
  }).join('');
  return '<div class="card chart" data-route="' + esc(r.route) + '"><strong>' + esc(r.route) + '</strong> <span class="totals">' + r.allowed.reduce((a, b) => a + b, 0) + ' allowed · ' + r.shed.reduce((a, b) => a + b, 0) + ' shed</span><svg viewBox="0 0 ' + w + ' ' + h + '" width="100%" height="' + h + '">' + bars + '</svg></div>';
}
async function load() {
  const [d, cfg, ov, li, he] = await Promise.all([api('/api/dashboard'), api('/config'), api('/overrides'), api('/lists'), fetch('/__sluice/health').then(r => r.json())]);
  const allowed = d.routes.reduce((n, r) => n + r.allowed.reduce((a, b) => a + b, 0), 0), shed = d.routes.reduce((n, r) => n + r.shed.reduce((a, b) => a + b, 0), 0);
  document.getElementById('summary').innerHTML = '<div class="card">Allowed, last hour<div class="figure" id="fig-allowed">' + allowed + '</div></div><div class="card">Shed, last hour<div class="figure" id="fig-shed">' + shed + '</div></div><div class="card">Routes<div class="figure">' + d.routes.length + '</div></div>';
  document.getElementById('charts').innerHTML = d.routes.map(chart).join('');
  document.getElementById('blocked').innerHTML = '<tr><th>route</th><th>identifier</th><th>refusals</th></tr>' + d.top_blocked.map(b => '<tr><td>' + esc(b.route) + '</td><td><code>' + esc(b.id.slice(0, 12)) + '…</code></td><td>' + b.refusals + '</td></tr>').join('');
  document.getElementById('health').innerHTML = he.regions.map(r => '<tr><td>' + esc(r.region) + '</td><td class="' + (r.reachable ? 'ok">reachable' : 'bad">unreachable') + '</td><td>' + (r.rtt_ms ?? '') + ' ms</td></tr>').join('');
  document.getElementById('overrides').innerHTML = ov.overrides.map(o => '<tr><td>' + esc(o.route) + '</td><td>' + esc(o.field.split(':')[0]) + (o.field.endsWith(':*') ? ' (all)' : ' (one client)') + '</td><td>' + o.rate + ' / ' + o.period_ms + ' ms</td><td>until ' + esc(o.expires_at) + '</td></tr>').join('') || '<tr><td>none</td></tr>';
  document.getElementById('lists').innerHTML = li.entries.map(e => '<tr><td>' + esc(e.kind) + '</td><td>' + esc(e.entry) + '</td><td>until ' + esc(e.expires_at) + '</td><td>' + esc(e.note || '') + '</td></tr>').join('') || '<tr><td>none</td></tr>';
  document.getElementById('limits').innerHTML = cfg.routes.flatMap(r => r.limits.map(l => '<option value="' + esc(r.name + '/' + l.name) + '">' + esc(r.name + ' / ' + l.name) + '</option>')).join('');
}
document.getElementById('override-form').addEventListener('submit', async e => {
  e.preventDefault(); const f = new FormData(e.target); const [route, limit] = String(f.get('target')).split('/');
  await send('/overrides', 'PUT', { route, limit, rate: Number(f.get('rate')), ttl: f.get('ttl'), ...(f.get('ip') ? { identity: { ip: f.get('ip') } } : {}) }); load();
});
document.getElementById('deny-form').addEventListener('submit', async e => {
  e.preventDefault(); const f = new FormData(e.target);
  await send('/lists', 'PUT', { kind: 'deny', entry: f.get('entry'), ttl: f.get('ttl') }); load();
});
load().then(() => document.body.dataset.loaded = 'yes');
</script></body></html>`;
