#!lua flags=allow-key-locking
--[[
decide.lua: the limits of one route that live in this Redis, decided in one call, all or nothing.
The clock is Redis's own (TIME, read once), never the caller's.

Algorithms (ARGV algo):
  1 token_bucket    continuous refill of `rate` per `period` up to `burst`. Tokens are integers in
                    units (one token = `unit` = period_us / g units, refill = rate / g units per µs,
                    g = gcd(period_us, rate)), so refill is exact. With warm-up (p1 = warmup_us > 0),
                    a bucket idle for the warm-up period restarts cold: one request's worth of
                    tokens, refilled at rate/3 rising linearly to rate over the warm-up period
                    (Guava's SmoothWarmingUp, cold factor 3).
                    value "tokens:unit:last_us[:warm_start_us]"
  2 leaky_bucket    a queue drained at `rate` per `period` (nginx limit_req, GCRA): up to `burst`
                    requests may wait ahead of this one (a request of cost c takes c slots, all
                    within the burst); the request is given the wait until its first slot
                    (delay_ms) and refused when that is beyond max_delay (p1, µs). With nodelay
                    (p2 = 1) the queue is taken at once and the wait is 0.
                    value "l:level:unit:last_us" (level in the same units as tokens)
  3 fixed_window    at most `rate` per window of `period`, windows aligned on Redis time.
                    value "f:count:window"
  4 sliding_window  two counters (this window and the last) weighted by how much of the last one
                    still overlaps the sliding period: prev × (P − elapsed) / P + curr ≤ rate.
                    value "s:prev:curr:window"
  Every key has a TTL: the time until it would be back to its initial state, so an expired key and
  a fresh limit are the same thing.

KEYS     1..n: the bucket of limit i: {key_prefix}:{route}:{limit}:{hash}
         n+1..: share and demand keys of `split` limits, referred to by index from ARGV:
           share   {key_prefix}:{route}:{limit}:share:{region}  "rate:burst" (absent: ARGV's)
           demand  {key_prefix}:{route}:{limit}:demand:{region} tokens asked for since the
                   rebalancer last read it (GETDEL); TTL 1 h
         last, only when ARGV[3] > 0: the route's override hash (below)
         Every key the script touches is one of these (Upstash's key-based locking needs that).
ARGV[1]  mode: "take" decide and charge; "peek" decide, charge nothing, record nothing;
         "refund" give back `cost` to every bucket (undoing a take another Redis vetoed)
ARGV[2]  n, the number of limits
ARGV[3]  override_idx: 0 when the caller passes the overrides in ARGV (its isolate's copy of the
         hash, at most a second old: the usual case); else the index in KEYS of the route's
         override hash, which the script then reads itself with one HMGET (the caller has no copy
         younger than a second, or the hash is too large to copy). The hash:
         {key_prefix}:{route}:overrides, fields "{limit}:{bucket hash}" (one client) and
         "{limit}:*" (everybody), values "rate:burst:period_ms:until_ms".
ARGV     then twelve per limit i, at 3 + 12*(i-1) + 1 ..:
           algo, rate, period_us, burst, cost   (integers; cost <= burst is checked at load)
           shadow      1: decide and report, but never block the request
           share_idx   index in KEYS of the share key, 0 for none
           demand_idx  index in KEYS of the demand key, 0 for none
           p1, p2      token_bucket: warmup_us, 0; leaky_bucket: max_delay_us, nodelay; else 0, 0
           override_all, override_own  the values of the hash fields "{limit}:*" and
                   "{limit}:{bucket hash}" as the caller knows them ("" for none; ignored when
                   override_idx > 0). The client's own wins over everybody's; one whose until_ms
                   Redis's clock has reached (until_ms <= now_ms) is ignored, so no edge clock
                   decides an expiry.
Returns  { admitted, then five per limit: allowed, remaining, retry_after_ms, reset_ms, delay_ms }
           admitted        1 if no enforced (non-shadow) limit refused; then, and only then,
                           every limit that allowed is charged. A refused request takes nothing.
           allowed         this limit alone would admit the request
           remaining       whole tokens (requests, queue places) left, after the charge if admitted
           retry_after_ms  when refused: ms until the request could pass (-1: never)
           reset_ms        ms until the limit is back to its initial state
           delay_ms        leaky_bucket: how long the request must wait for its slot
Cost (Upstash bills every command a script runs, EVALSHA included): 1 TIME + 1 MGET of every
      bucket and share key, + 1 SET (or DEL, a bucket back to its initial state) per bucket
      charged (take, when admitted) or refunded; a peek or a refusal writes nothing. `split`
      limits add 1 INCRBY of their demand key on take (+1 PEXPIRE when it starts a new count),
      refusals included. override_idx > 0 adds 1 HMGET. So one limit: EVALSHA + TIME + MGET + SET
      = 4; three limits: 6.
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now / 1000)

local mode = ARGV[1]
local n = tonumber(ARGV[2])
-- the ARGV of limit i, j = 1..12 (see the contract above)
local function arg(i, j) return ARGV[3 + 12 * (i - 1) + j] end

local function gcd(a, b)
  while b > 0 do a, b = b, a % b end
  return a
end

local function ceil_ms(us) return math.ceil(math.ceil(us) / 1000) end

-- Each algorithm: check(l) fills l.allowed, l.retry (ms) and returns nothing; commit(l) applies
-- the charge (take) or refund; report(l) gives remaining, reset_ms, ttl_ms and the value to store.

-- both buckets count in exact integer units: one token is `unit` units, `refill` units a µs
local function units(l)
  local g = gcd(l.period, math.max(l.rate, 1))
  l.unit, l.refill = l.period / g, l.rate / g
  l.cap, l.need = l.burst * l.unit, l.cost * l.unit
end

-- token bucket ------------------------------------------------------------------------------
local token = {}
function token.load(l, raw)
  units(l)
  l.warm = 0
  local stored, stored_unit, last, warm = string.match(raw or '', '^(%d+):(%d+):(%d+):?(%d*)$')
  local cold = l.warmup > 0 and (not stored or now - tonumber(last) >= l.warmup)
  if cold then
    l.tokens, l.warm = math.min(l.cap, l.need), now
    return
  end
  if not stored then
    l.tokens = l.cap
    return
  end
  local tokens = tonumber(stored)
  stored_unit = tonumber(stored_unit)
  if stored_unit ~= l.unit then
    -- the limit (or this region's share of it) changed: keep whole tokens, in the new units
    tokens = math.floor(tokens / stored_unit) * l.unit
  end
  -- a clock that went backwards (failover) refills nothing rather than a negative amount
  local t1 = tonumber(last)
  local t2 = math.max(t1, now)
  local added = (t2 - t1) * l.refill
  if warm ~= '' and tonumber(warm) > 0 and l.warmup > 0 then
    -- during warm-up the rate climbs from rate/3 to rate: integrate it over [t1, t2]
    local s, w = tonumber(warm), l.warmup
    local a, b = math.min(t1 - s, w), math.min(t2 - s, w)
    added = l.refill * ((b - a) / 3 + (b * b - a * a) / (3 * w) + math.max(0, (t2 - s) - math.max(t1 - s, w)))
    if t2 - s < w then l.warm = s end
    added = math.floor(added)
  end
  l.tokens = math.min(l.cap, tokens + added)
end
function token.check(l)
  l.allowed = (l.rate > 0 and l.need <= l.cap and l.tokens >= l.need) and 1 or 0
  if l.allowed == 0 then
    if l.rate == 0 or l.need > l.cap then l.retry = -1
    else
      local rate_now = l.refill
      if l.warm > 0 then rate_now = l.refill * (1 / 3 + 2 / 3 * math.min(1, (now - l.warm) / l.warmup)) end
      l.retry = ceil_ms((l.need - l.tokens) / rate_now)
    end
  end
end
function token.commit(l, sign)
  l.tokens = math.min(l.cap, l.tokens - sign * l.need)
end
function token.report(l)
  local reset = l.refill > 0 and ceil_ms((l.cap - l.tokens) / l.refill) or 0
  local value = string.format('%d:%d:%d', l.tokens, l.unit, now)
  if l.warm > 0 then value = value .. string.format(':%d', l.warm) end
  return math.floor(l.tokens / l.unit), reset, math.max(reset, l.warmup > 0 and ceil_ms(l.warmup) or 0), value, l.tokens >= l.cap and l.warmup == 0
end

-- leaky bucket ------------------------------------------------------------------------------
local leaky = {}
function leaky.load(l, raw)
  units(l)
  l.level = 0
  local level, stored_unit, last = string.match(raw or '', '^l:(%d+):(%d+):(%d+)$')
  if level then
    level, stored_unit = tonumber(level), tonumber(stored_unit)
    -- reconfigured: whole queued requests, rounded up, in the new units
    if stored_unit ~= l.unit then level = math.ceil(level / stored_unit) * l.unit end
    l.level = math.max(0, level - math.max(0, now - tonumber(last)) * l.refill)
  end
end
function leaky.check(l)
  local wait = l.refill > 0 and math.ceil(l.level / l.refill) or 0
  -- > 0: the queue has no room for the whole request (all `cost` slots within `burst`)
  local over_queue = l.level + l.need - l.unit - l.cap
  -- > 0: its first slot is further away than max_delay
  local over_delay = l.nodelay == 0 and (l.level - l.max_delay * l.refill) or 0
  l.allowed = (l.rate > 0 and over_queue <= 0 and over_delay <= 0) and 1 or 0
  l.delay = (l.allowed == 1 and l.nodelay == 0) and ceil_ms(wait) or 0
  if l.allowed == 0 then l.retry = (l.rate > 0 and l.need <= l.cap) and ceil_ms(math.max(over_queue, over_delay) / l.refill) or -1 end
end
function leaky.commit(l, sign)
  l.level = math.max(0, l.level + sign * l.need)
end
function leaky.report(l)
  local reset = l.refill > 0 and ceil_ms(l.level / l.refill) or 0
  return math.max(0, math.floor((l.cap - l.level) / l.unit)), reset, reset, string.format('l:%d:%d:%d', l.level, l.unit, now), l.level == 0
end

-- windows -----------------------------------------------------------------------------------
local function window_of(l, stored_w)
  l.p = l.period / 1000
  l.w = math.floor(now_ms / l.p)
  l.e = now_ms - l.w * l.p
  -- a clock that went backwards (failover) stays in the window already counted, not a fresh one
  if stored_w and stored_w > l.w then l.w, l.e = stored_w, 0 end
end

local fixed = {}
function fixed.load(l, raw)
  local count, w = string.match(raw or '', '^f:(%d+):(%d+)$')
  window_of(l, tonumber(w))
  l.count = (count and tonumber(w) == l.w) and tonumber(count) or 0
end
function fixed.check(l)
  l.allowed = (l.count + l.cost <= l.rate) and 1 or 0
  if l.allowed == 0 then l.retry = l.cost > l.rate and -1 or (l.p - l.e) end
end
function fixed.commit(l, sign)
  l.count = math.max(0, l.count + sign * l.cost)
end
function fixed.report(l)
  local reset = l.count > 0 and (l.p - l.e) or 0
  return math.max(0, l.rate - l.count), reset, l.p - l.e, string.format('f:%d:%d', l.count, l.w), l.count == 0
end

local sliding = {}
function sliding.load(l, raw)
  local prev, curr, w = string.match(raw or '', '^s:(%d+):(%d+):(%d+)$')
  window_of(l, tonumber(w))
  l.prev, l.curr = 0, 0
  if prev then
    w = tonumber(w)
    if w == l.w then l.prev, l.curr = tonumber(prev), tonumber(curr)
    elseif w == l.w - 1 then l.prev = tonumber(curr) end
  end
end
function sliding.check(l)
  -- everything times P, so the weights stay integers: prev*(P - e) + (curr + cost)*P <= rate*P
  local p, e = l.p, l.e
  l.allowed = (l.prev * (p - e) + (l.curr + l.cost) * p <= l.rate * p) and 1 or 0
  if l.allowed == 0 then
    if l.cost > l.rate then l.retry = -1
    elseif l.curr + l.cost <= l.rate then
      -- later in this window, when enough of the last one has slid out
      l.retry = math.ceil((l.prev - (l.rate - l.curr - l.cost)) * p / l.prev) - e
    else
      -- in the next window, when enough of this one has slid out
      local later = 0
      if l.curr > l.rate - l.cost then later = math.ceil((l.curr - (l.rate - l.cost)) * p / l.curr) end
      l.retry = (p - e) + later
    end
  end
end
function sliding.commit(l, sign)
  l.curr = math.max(0, l.curr + sign * l.cost)
end
function sliding.report(l)
  local used = math.ceil((l.prev * (l.p - l.e) + l.curr * l.p) / l.p)
  local reset = 0
  if l.curr > 0 then reset = 2 * l.p - l.e elseif l.prev > 0 then reset = l.p - l.e end
  return math.max(0, l.rate - used), reset, 2 * l.p - l.e, string.format('s:%d:%d:%d', l.prev, l.curr, l.w), l.prev == 0 and l.curr == 0
end

local algorithms = { token, leaky, fixed, sliding }

-- runtime overrides set through the admin API: the values the caller knows, or, when its copy is
-- too old (or the hash too large to copy), one HMGET of both fields of every limit
local override = {}
do
  local values = {}
  local ov_idx = tonumber(ARGV[3])
  if ov_idx > 0 then
    local fields = {}
    for i = 1, n do
      local name, hash = string.match(KEYS[i], ':([^:]+):([^:]+)$')
      -- everybody's first, the client's own second (it wins below); the short field first also
      -- keeps Redis's argument cache from handing the later SET a needlessly large allocation
      fields[2 * i - 1], fields[2 * i] = name .. ':*', name .. ':' .. hash
    end
    values = redis.call('HMGET', KEYS[ov_idx], unpack(fields))
  else
    for i = 1, n do values[2 * i - 1], values[2 * i] = arg(i, 11), arg(i, 12) end
  end
  for j = 1, 2 * n do
    local r, b, p, u = string.match(values[j] or '', '^(%d+):(%d+):(%d+):(%d+)$')
    if r and tonumber(u) > now_ms then
      override[math.ceil(j / 2)] = { tonumber(r), tonumber(b), tonumber(p) * 1000 }
    end
  end
end

-- every read in one MGET: the buckets (KEYS 1..n), then the shares of split limits
local reads, share_at = {}, {}
for i = 1, n do reads[i] = KEYS[i] end
for i = 1, n do
  local share_idx = tonumber(arg(i, 7))
  if share_idx > 0 then
    reads[#reads + 1] = KEYS[share_idx]
    share_at[i] = #reads
  end
end
local stored = redis.call('MGET', unpack(reads))

-- pass 1: every limit loaded at now, and whether each would admit
local admitted = 1
local limits = {}
for i = 1, n do
  local l = {
    algo = algorithms[tonumber(arg(i, 1))],
    rate = tonumber(arg(i, 2)), period = tonumber(arg(i, 3)), burst = tonumber(arg(i, 4)), cost = tonumber(arg(i, 5)),
    shadow = arg(i, 6) == '1', retry = 0, delay = 0,
  }
  local demand_idx = tonumber(arg(i, 8))
  l.warmup, l.max_delay, l.nodelay = tonumber(arg(i, 9)), tonumber(arg(i, 9)), tonumber(arg(i, 10))
  if override[i] then l.rate, l.burst, l.period = unpack(override[i]) end
  if share_at[i] then
    local r, b = string.match(stored[share_at[i]] or '', '^(%d+):(%d+)$')
    if r then l.rate, l.burst = tonumber(r), tonumber(b) end
  end
  if mode == 'take' and demand_idx > 0 then
    -- demand counts every attempt, refused ones too; the rebalancer reads and resets it (GETDEL)
    if redis.call('INCRBY', KEYS[demand_idx], l.cost) == l.cost then redis.call('PEXPIRE', KEYS[demand_idx], 3600000) end
  end
  l.algo.load(l, stored[i])
  if mode == 'refund' then
    l.allowed = 1
  else
    l.algo.check(l)
    if l.allowed == 0 and not l.shadow then admitted = 0 end
  end
  limits[i] = l
end

-- pass 2: charge (only if admitted), refund, and report
local out = { admitted }
for i = 1, n do
  local l = limits[i]
  local write = false
  if mode == 'take' and admitted == 1 and l.allowed == 1 then
    l.algo.commit(l, 1)
    write = true
  elseif mode == 'refund' then
    l.algo.commit(l, -1)
    write = true
  end
  local remaining, reset_ms, ttl_ms, value, empty = l.algo.report(l)
  if write then
    if empty then redis.call('DEL', KEYS[i]) else redis.call('SET', KEYS[i], value, 'PX', math.max(1, ttl_ms)) end
  end
  local o = 1 + 5 * (i - 1)
  out[o + 1] = l.allowed
  out[o + 2] = remaining
  out[o + 3] = l.retry
  out[o + 4] = reset_ms
  out[o + 5] = (admitted == 1 and not l.shadow) and l.delay or 0
end
return out
