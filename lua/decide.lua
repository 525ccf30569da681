--[[
decide.lua: the limits of one route that live in this Redis, decided in one call, all or nothing.

Algorithm: token bucket with continuous refill. Tokens are integers in "units" (one token =
`unit` units) so that refill is exact: `rate` tokens per `period` is `refill` units per
microsecond, where unit = period_us / g and refill = rate / g (g = gcd(period_us, rate)).
The clock is Redis's own (TIME, read once), never the caller's.

KEYS     1..n: the bucket of limit i: {key_prefix}:{route}:{limit}:{hash}; value
         "tokens:unit:last_us"; TTL = time until the bucket is full again, so an expired key and
         a full bucket are the same thing.
         n+1..: share and demand keys of `split` limits, referred to by index from ARGV:
           share   {key_prefix}:{route}:{limit}:share:{region}  "rate:burst", this region's part
                   of the global figures, written by the rebalancer (absent: ARGV's rate/burst)
           demand  {key_prefix}:{route}:{limit}:demand:{region} tokens asked for (refused ones
                   included) since the rebalancer last read it (GETDEL); TTL 1 h
ARGV[1]  mode: "take" decide and charge; "peek" decide, charge nothing, record nothing;
         "refund" give back `cost` to every bucket (undoing a take another Redis vetoed)
ARGV[2]  n, the number of limits
ARGV     then seven per limit i, at 2 + 7*(i-1) + 1 ..:
           rate, period_us, burst, cost   (integers; cost <= burst is checked at load)
           shadow      1: decide and report, but never block the request
           share_idx   index in KEYS of the share key, 0 for none
           demand_idx  index in KEYS of the demand key, 0 for none
Returns  { admitted, then four per limit: allowed, remaining, retry_after_ms, reset_ms }
           admitted        1 if no enforced (non-shadow) limit refused; then, and only then,
                           every limit that allowed is charged. A refused request takes nothing.
           allowed         this limit alone would admit the request
           remaining       whole tokens left (after the charge when admitted)
           retry_after_ms  when refused: ms until `cost` tokens are there (-1: never)
           reset_ms        ms until the bucket is full again
         (refund returns { 1, then per limit 1, remaining, 0, reset_ms })
Cost: 1 TIME + 1 GET per limit (+1 GET per share), + 1 SET per limit when charged
      (+1 INCRBY per demand key on take).
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local mode = ARGV[1]
local n = tonumber(ARGV[2])

local function gcd(a, b)
  while b > 0 do a, b = b, a % b end
  return a
end

-- pass 1: every bucket refilled to now, and whether each limit would admit
local admitted = 1
local state = {}
for i = 1, n do
  local a = 2 + 7 * (i - 1)
  local rate, period, burst, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local share_idx, demand_idx = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  if share_idx > 0 then
    local share = redis.call('GET', KEYS[share_idx])
    local r, b = string.match(share or '', '^(%d+):(%d+)$')
    if r then rate, burst = tonumber(r), tonumber(b) end
  end
  if mode == 'take' and demand_idx > 0 then
    if redis.call('INCRBY', KEYS[demand_idx], cost) == cost then redis.call('PEXPIRE', KEYS[demand_idx], 3600000) end
  end

  local g = gcd(period, math.max(rate, 1))
  local unit, refill = period / g, rate / g
  local cap, need = burst * unit, cost * unit

  local tokens = cap
  local raw = redis.call('GET', KEYS[i])
  if raw then
    local stored, stored_unit, last = string.match(raw, '^(%d+):(%d+):(%d+)$')
    if stored then
      tokens = tonumber(stored)
      stored_unit = tonumber(stored_unit)
      if stored_unit ~= unit then
        -- the limit (or this region's share of it) changed: keep whole tokens, in the new units
        tokens = math.floor(tokens / stored_unit) * unit
      end
      -- a clock that went backwards (failover) refills nothing rather than a negative amount
      tokens = math.min(cap, tokens + math.max(0, now - tonumber(last)) * refill)
    end
  end

  local allowed = (rate > 0 and need <= cap and tokens >= need) and 1 or 0
  if mode == 'refund' then
    tokens, allowed = math.min(cap, tokens + need), 1
  elseif allowed == 0 and ARGV[a + 5] ~= '1' then
    admitted = 0
  end
  state[i] = { refill, unit, cap, need, tokens, allowed }
end

-- pass 2: charge (only if admitted) and report
local out = { admitted }
for i = 1, n do
  local refill, unit, cap, need, tokens, allowed = unpack(state[i])
  local retry_ms = 0
  if allowed == 0 then
    if refill == 0 or need > cap then retry_ms = -1 else retry_ms = math.ceil(math.ceil((need - tokens) / refill) / 1000) end
  end
  local charge = mode == 'take' and admitted == 1 and allowed == 1
  if charge then tokens = tokens - need end
  local reset_ms = 0
  if refill > 0 then reset_ms = math.ceil(math.ceil((cap - tokens) / refill) / 1000) end
  if charge or mode == 'refund' then
    if tokens >= cap then
      redis.call('DEL', KEYS[i])
    else
      redis.call('SET', KEYS[i], string.format('%d:%d:%d', tokens, unit, now), 'PX', math.max(1, reset_ms))
    end
  end
  local o = 1 + 4 * (i - 1)
  out[o + 1] = allowed
  out[o + 2] = math.floor(tokens / unit)
  out[o + 3] = retry_ms
  out[o + 4] = reset_ms
end
return out
