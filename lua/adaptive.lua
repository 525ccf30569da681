#!lua flags=allow-key-locking
--[[
adaptive.lua: an adaptive route's in-flight limit in one region (docs/algorithms.md, Adaptive limit).
The clock is Redis's own (TIME, read once), unless the caller passes its own: a Redis that
refuses TIME in scripts gets the isolate's clock as the last ARGV, "clock:{µs}"
(src/store/clock.ts; lua/decide.lua, Clock). The state needs no floor: its window start (ws)
only ever moves to a later clock (a window closes at ws + interval or later, a stale one is
replaced at ws + 10 intervals), and the override's until with it.

Each isolate reports, about twice per interval and off the request path, what the route's origin
did since its last report: how many responses, how many failed (5xx, no answer), the most requests it
saw in flight at once, and a histogram of the successful responses' latencies. The reports of
every isolate of the region go into one window; when the window is `interval` old and holds at
least MIN_SAMPLES responses, it closes and the limit moves:

  short   the window's latency at the configured percentile (the histogram bucket's upper bound)
  ref     `target`, or without one tolerance × base, where base is the lowest `short` seen since
          the last probe (the latency of the origin unloaded, as well as the traffic shows it)
  g       clamp(ref / short, 0.5, 1); with errors in ERROR_SHARE or more of the window's
          responses, min(g, max(0.5, 1 − error share))
  limit   grows by max(1, CLIMB × sqrt(limit)) when g = 1, no errors, and the window used at least half
          of the limit (an idle origin is no evidence that more would be fine); otherwise
          shrinks at once to limit × g (shed before the origin falls over, climb back gently)
          clamped to [min, max]
  probe   (no target only) every PROBE_EVERY windows, two windows run at half the limit: the
          first lets the requests admitted before it finish (its latencies are still the full
          limit's), and base is reset to what the second measures (at most twice the base
          before), so it can follow an origin that became slower for good, and learn a lower one
          that a loaded origin never showed

The limit in force (floor(limit), or half of it while probing) is written as the override of the
route's adaptive bucket (KEYS[2], field ARGV[1], "limit:limit:lease_ms:until_ms"), which decide.lua
already reads: no decision waits for this script.

KEYS[1]  {key_prefix}:{route}:adaptive:state:{hash}   hash: limit, base, ws (window start, ms),
         n, e, pk (the window's responses, errors, peak in flight), h (the window's histogram
         "i:count,..."), since (windows since the last probe), probe ("1" in a probe's first window, "2" in its second)
KEYS[2]  {key_prefix}:{route}:overrides
KEYS[3]  {key_prefix}:version, the change counter of what isolates copy: bumped (INCR, and
         PTTL + PEXPIRE keeping it at least 30 days) after the override is written, so every isolate
         refetches its copy of the overrides
ARGV[1]  the override field: "adaptive:{hash}"
ARGV[2]  "initial:min:max:interval_ms:lease_ms:target_ms:quantile_permille:tolerance_permille"
         (target_ms 0: learn it)
ARGV[3]  "count:errors:peak", this report's
ARGV[4]  the report's histogram "i:count,...": bucket i holds latencies in (2^((i-1)/4), 2^(i/4)] ms
         (bucket 0: 1 ms or less)
ARGV     last, optional: "clock:{µs}", the caller's clock, used instead of TIME
Returns  { limit in force, short × 10, base × 10, 1 if a window closed (else 0) }  (short -1: none)
Cost     EVALSHA + TIME + HGETALL + HSET + PEXPIRE = 5; a report that closes a window adds HSET
         and PTTL of the overrides hash (and PEXPIRE when its TTL is shorter than the state's) and
         INCR and PTTL of the version (and PEXPIRE when it has less than 30 days left).
]]

local MIN_SAMPLES = 10
local PROBE_EVERY = 8
local STALE_WINDOWS = 10
local ERROR_SHARE = 0.05
local CLIMB = 0.5
local STATE_TTL_MS = 600000

-- the clock (ms): the caller's when it passes one (the last ARGV), else Redis's TIME
local now = tonumber(string.match(ARGV[#ARGV] or '', '^clock:(%d+)$'))
if now then
  now = math.floor(now / 1000)
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function numbers(text, pattern, what)
  local found = { string.match(text or '', pattern) }
  if #found == 0 then error('adaptive.lua: bad ' .. what .. ': ' .. tostring(text)) end
  for i = 1, #found do found[i] = tonumber(found[i]) end
  return found
end

local s = numbers(ARGV[2], '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(%d+)$', 'settings')
local initial, min, max, interval, lease, target = s[1], s[2], s[3], s[4], s[5], s[6]
local quantile, tolerance = s[7] / 1000, s[8] / 1000
local report = numbers(ARGV[3], '^(%d+):(%d+):(%d+)$', 'report')

local function histogram(text, into)
  for i, c in string.gmatch(text or '', '(%d+):(%d+)') do
    into[tonumber(i)] = (into[tonumber(i)] or 0) + tonumber(c)
  end
  return into
end

local function serialise(h)
  local parts = {}
  for i, c in pairs(h) do parts[#parts + 1] = i .. ':' .. c end
  return table.concat(parts, ',')
end

-- the upper bound of the bucket that holds the quantile of the histogram's latencies (nil: empty)
local function percentile(h)
  local keys, total = {}, 0
  for i, c in pairs(h) do keys[#keys + 1] = i; total = total + c end
  if total == 0 then return nil end
  table.sort(keys)
  local rank, seen = math.max(1, math.ceil(quantile * total)), 0
  for _, i in ipairs(keys) do
    seen = seen + h[i]
    if seen >= rank then return 2 ^ (i / 4) end
  end
end

local raw = redis.call('HGETALL', KEYS[1])
local st = {}
for i = 1, #raw, 2 do st[raw[i]] = raw[i + 1] end
local w = {
  limit = tonumber(st.limit) or initial, base = tonumber(st.base) or 0, ws = tonumber(st.ws),
  n = tonumber(st.n) or 0, e = tonumber(st.e) or 0, pk = tonumber(st.pk) or 0,
  since = tonumber(st.since) or 0, probe = tonumber(st.probe) or 0, h = histogram(st.h, {}),
}
local fresh = w.ws == nil
-- a window nobody reported into for long describes another time: start a new one
if fresh or now - w.ws > STALE_WINDOWS * interval then w.ws, w.n, w.e, w.pk, w.h = now, 0, 0, 0, {} end
w.n, w.e, w.pk = w.n + report[1], w.e + report[2], math.max(w.pk, report[3])
histogram(ARGV[4], w.h)

local function clamp(x, lo, hi) return math.max(lo, math.min(hi, x)) end

-- the window closes: the limit moves (or a probe ends), and a new window starts
local function close(short)
  local err = w.e / w.n
  if w.probe == 1 then
    -- a probe's first window: its responses were mostly admitted under the full limit
    w.probe = 2
    return
  end
  if w.probe == 2 then
    -- a probe ends: what half the limit showed is the unloaded latency now (rising at most
    -- twofold per probe, so one probe that met a passing slowdown does not undo what was learnt)
    if short then w.base = math.min(short, 2 * w.base) end
    w.probe, w.since = 0, 0
    return
  end
  if target == 0 and short and (w.base == 0 or short < w.base) then w.base = short end
  local ref = target > 0 and target or tolerance * w.base
  local g = short and clamp(ref / short, 0.5, 1) or 0.5
  if err >= ERROR_SHARE then g = math.min(g, math.max(0.5, 1 - err)) end
  if g >= 1 and err < ERROR_SHARE then
    if w.pk * 2 >= w.limit then w.limit = w.limit + math.max(1, CLIMB * math.sqrt(w.limit)) end
  else
    w.limit = w.limit * g
  end
  w.limit = clamp(w.limit, min, max)
  if target == 0 then
    w.since = w.since + 1
    if w.since >= PROBE_EVERY then w.probe = 1 end
  end
end

local closed, short = false, nil
if now - w.ws >= interval and w.n >= MIN_SAMPLES then
  short = percentile(w.h)
  close(short)
  closed = true
  w.ws, w.n, w.e, w.pk, w.h = now, 0, 0, 0, {}
end

local in_force = math.floor(w.limit)
if w.probe > 0 then in_force = math.max(min, math.floor(w.limit / 2)) end

redis.call('HSET', KEYS[1], 'limit', string.format('%.4f', w.limit), 'base', string.format('%.3f', w.base),
  'ws', w.ws, 'n', w.n, 'e', w.e, 'pk', w.pk, 'since', w.since, 'probe', w.probe, 'h', serialise(w.h))
redis.call('PEXPIRE', KEYS[1], STATE_TTL_MS)
if fresh or closed then
  redis.call('HSET', KEYS[2], ARGV[1], in_force .. ':' .. in_force .. ':' .. lease .. ':' .. (now + STATE_TTL_MS))
  if redis.call('PTTL', KEYS[2]) < STATE_TTL_MS then redis.call('PEXPIRE', KEYS[2], STATE_TTL_MS) end
  -- the counter outlives what it counts (at least 30 days from every bump): absent, it means nothing was ever written
  redis.call('INCR', KEYS[3])
  if redis.call('PTTL', KEYS[3]) < 2592000000 then redis.call('PEXPIRE', KEYS[3], 2592000000) end
end
return { in_force, short and math.floor(short * 10) or -1, math.floor(w.base * 10), closed and 1 or 0 }
