--[[
decide.lua: every limit of one route, decided in one call, all or nothing.

Algorithm: token bucket with continuous refill. Tokens are integers in "units" (one token =
`unit` units) so that refill is exact: `rate` tokens per `period` is `refill` units per
microsecond, where unit = period_us / g and refill = rate / g (g = gcd(period_us, rate)).
The clock is Redis's own (TIME, read once), never the caller's.

KEYS[i]  bucket of limit i: {key_prefix}:{route}:{limit}:{sha256(identifier)[0..32]}
         value "tokens:unit:last_us" (string); TTL = time until the bucket is full again, so an
         expired key and a full bucket are the same thing.
ARGV     five per limit i, at 5*(i-1)+1 ..:
           refill  units added per microsecond (integer)
           unit    units per token (integer)
           burst   capacity, in tokens
           cost    tokens this request takes
           shadow  1: decide and report, but never block the request
Returns  { admitted, then four per limit: allowed, remaining, retry_after_ms, reset_ms }
           admitted        1 if no enforced (non-shadow) limit refused; then, and only then,
                           every limit that allowed is charged. A refused request takes nothing.
           allowed         this limit alone would admit the request
           remaining       whole tokens left (after the charge when admitted)
           retry_after_ms  when refused: ms until `cost` tokens are there (-1: never, cost > burst)
           reset_ms        ms until the bucket is full again
Cost: 1 TIME + 1 GET per limit, + 1 SET per limit when admitted.
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local n = #KEYS
local admitted = 1
local state = {}

-- pass 1: refill every bucket to now and see whether each limit would admit
for i = 1, n do
  local a = 5 * (i - 1)
  local refill = tonumber(ARGV[a + 1])
  local unit = tonumber(ARGV[a + 2])
  local cap = tonumber(ARGV[a + 3]) * unit
  local need = tonumber(ARGV[a + 4]) * unit

  local tokens = cap
  local raw = redis.call('GET', KEYS[i])
  if raw then
    local stored, stored_unit, last = string.match(raw, '^(%d+):(%d+):(%d+)$')
    if stored then
      tokens = tonumber(stored)
      stored_unit = tonumber(stored_unit)
      if stored_unit ~= unit then
        -- the limit was reconfigured: keep whole tokens, in the new units
        tokens = math.floor(tokens / stored_unit) * unit
      end
      -- a clock that went backwards (failover) refills nothing rather than a negative amount
      local elapsed = math.max(0, now - tonumber(last))
      tokens = math.min(cap, tokens + elapsed * refill)
    end
  end

  local allowed = (need <= cap and tokens >= need) and 1 or 0
  if allowed == 0 and ARGV[a + 5] ~= '1' then admitted = 0 end
  state[i] = { refill, unit, cap, need, tokens, allowed }
end

-- pass 2: charge (only if admitted) and report
local out = { admitted }
for i = 1, n do
  local refill, unit, cap, need, tokens, allowed = unpack(state[i])
  local retry_ms = 0
  if need > cap then
    retry_ms = -1
  elseif allowed == 0 then
    retry_ms = math.ceil(math.ceil((need - tokens) / refill) / 1000)
  end
  if admitted == 1 and allowed == 1 then tokens = tokens - need end
  local reset_ms = math.ceil(math.ceil((cap - tokens) / refill) / 1000)
  if admitted == 1 and allowed == 1 then
    redis.call('SET', KEYS[i], string.format('%d:%d:%d', tokens, unit, now), 'PX', math.max(1, reset_ms))
  end
  local o = 1 + 4 * (i - 1)
  out[o + 1] = allowed
  out[o + 2] = math.floor(tokens / unit)
  out[o + 3] = retry_ms
  out[o + 4] = reset_ms
end
return out
