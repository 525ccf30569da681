#!lua flags=allow-key-locking
--[[
decide.lua: the limits of one route that live in this Redis, decided in one call, all or nothing.
The clock is Redis's own (TIME, read once), unless the caller passes its own (see Clock).

Clock    Redis's TIME, read once at the top. A Redis that refuses TIME in scripts (ElastiCache
         Serverless) gets the calling isolate's clock instead, passed as the last ARGV,
         "clock:{µs}" (src/store/clock.ts). Whichever clock it is, no key's state goes back in
         time: each limit is decided at max(clock, the time its key last recorded), so a clock
         behind another can delay a refill but never grant one twice:
           token_bucket, leaky_bucket   the value's last_us
           fixed_window, sliding_window the stored window: never an earlier one (below)
           concurrency                  a new slot expires no earlier than a slot already held
           sliding_log                  with a passed clock only: the log's newest score
                                        (+1 ZRANGE); Redis's own TIME is the log's reference
         Wherever this contract says Redis time or Redis's clock, read: the script's clock.

Algorithms (ARGV algo):
  1 token_bucket    continuous refill of `rate` per `period` up to `burst`. Tokens are integers in
                    units (one token = `unit` = period_us / g units, refill = rate / g units per µs,
                    g = gcd(period_us, rate)), so refill is exact. With warm-up (warmup_us > 0),
                    a bucket idle for the warm-up period restarts cold: one request's worth of
                    tokens, refilled at rate/3 rising linearly to rate over the warm-up period
                    (Guava's SmoothWarmingUp, cold factor 3).
                    value "tokens:unit:last_us[:warm_start_us]", or with lease tokens held
                    "tokens:unit:last_us:L{epoch}:{held}:{held_next}" (see Leases). `tokens` may
                    be negative (a leading "-"): a bucket in debt after a "settle" charged more
                    than it held; it refuses until the refill pays the debt back (retry_after_ms:
                    until tokens >= cost again), and its TTL (the time to refill to `burst`)
                    covers the debt, so it never expires in debt.
  2 leaky_bucket    a queue drained at `rate` per `period` (nginx limit_req, GCRA): up to `burst`
                    requests may wait ahead of this one (a request of cost c takes c slots, all
                    within the burst); the request is given the wait until its first slot
                    (delay_ms) and refused when that is beyond max_delay_us. With nodelay = 1
                    the queue is taken at once and the wait is 0.
                    value "l:level:unit:last_us" (level in the same units as tokens)
  3 fixed_window    at most `rate` per window of `period`, windows aligned on Redis time (on UTC),
                    or with `window` on local midnight in a time zone (see `window` below).
                    value "f:count:window"
  4 sliding_window  two counters (this window and the last) weighted by how much of the last one
                    still overlaps the sliding period: prev × (P − elapsed) / P + curr ≤ rate.
                    value "s:prev:curr:window"
  5 concurrency     at most `rate` requests in flight at once (docs/algorithms.md, In-flight caps): a slot per
                    admitted request, named by the caller (slot_id) and held until it is
                    released ("release" mode) or its lease (`period`) expires, whichever is first.
                    A request holds one slot whatever its `cost` (the configuration allows 1 only);
                    `burst` is ignored; an override's rate and period are the limit and the lease.
                    Expired slots are dropped on every read (at this call's TIME), and from the
                    value with the next write. retry_after_ms: until enough slots expire to make room, nothing being
                    released (an upper bound: a release frees one sooner); reset_ms: until the
                    last slot expires. Never leased.
                    value "c:{id}@{expiry_us},{id}@{expiry_us},..." (the live slots, in the order
                    taken; at most 1000 of them, the configuration's cap)
  6 sliding_log     exact: at most `rate` cost units admitted in any sliding `period` (now - period, now],
                    or in any period + margin_us when a margin is given.
                    The key is a sorted set, not a string (MGET reads it as nil): one member
                    "{entry}*{cost}" per admitted request, whatever its cost, scored by its time
                    (µs), `entry` the request's id (entry_id; required in "take" and "refund", which
                    removes the request's own member: named by its id and cost, so a refund passes
                    the cost its take charged), and the member "#sum" scored by minus the
                    sum of the others' costs (the running total the count is read from). Members
                    that left the period are trimmed on every write (and subtracted from the sum),
                    so at most `rate` are kept (the configuration caps `rate` at 10000). A member
                    "{entry}:{j}" is one cost unit of a log written before the sum was kept; a log
                    without "#sum" is summed once, whole. retry_after_ms: until the oldest members
                    holding the cost that must leave to make room do; reset_ms (and the TTL): until
                    the newest leaves. A string at the key (another algorithm's state, the limit
                    reconfigured) is an empty log, replaced by the first take. Never leased.
  Every key has a TTL: the time until it would be back to its initial state, so an expired key and
  a fresh limit are the same thing.

Leases (token_bucket without warm-up, fixed_window; never shadow or split limits): tokens debited
  here and handed to one isolate, which admits from them without calling Redis.
  - granted in "take" (after the request is admitted) and "lease" mode, for a limit whose caller
    asks (lease_ask > 0), only while remaining >= reserve = max(ceil(capacity / 4), cost):
    leased = min(lease_ask, floor(remaining / 4)), debited in the same SET as the request.
  - fixed_window: the leased count is part of this window's count; the lease ends GRACE_MS before
    the window does, or after LEASE_MS (whichever is first); none shorter than LEASE_MIN_MS.
  - token_bucket: tokens leased must not come back through the refill while the isolate may
    still spend them (a refill would then pass `burst` in one instant), so the bucket holds them:
    `held` units per lease epoch (LEASE_MS of Redis time), the refill tops the bucket up to
    burst − held only, and an epoch's holding is released when it ends (its leases ended GRACE_MS
    before). A lease belongs to the current epoch if that leaves it LEASE_MIN_MS, else to the
    next, so it lives from LEASE_MIN_MS to 2·LEASE_MS − GRACE_MS − LEASE_MIN_MS. Closing a lease
    ("lease" or "return" mode) releases its `granted` tokens from its epoch at once.
  - returning unused tokens, only while the lease's epoch (token_bucket) or window (fixed_window)
    lasts (GRACE_MS after the lease ends, at least): added back up to burst − held, or taken off
    the window's count. A later return is dropped: the window is gone, or the epoch's holding was
    released and the refill has replaced those tokens already (given back on top, they could pass
    the burst).

KEYS     1..n: the bucket of limit i: {key_prefix}:{route}:{limit}:{hash}
         n+1..: share and demand keys of `split` limits, referred to by index from ARGV:
           share   {key_prefix}:{route}:{limit}:share:{region}  "rate:burst" (absent: ARGV's)
           demand  {key_prefix}:{route}:{limit}:demand:{region} tokens asked for since the
                   rebalancer last read it (GETDEL); TTL 1 h
         then, only when ARGV[3] > 0: the route's override hash (below)
         last (KEYS[#KEYS]): {key_prefix}:version, the change counter of what isolates copy
           (lists, overrides), read in the same MGET and returned last, so an isolate learns
           of a change without polling
         Every key the script touches is one of these (Upstash's key-based locking needs that).
ARGV[1]  mode: "take" decide and charge; "peek" decide, charge nothing, record nothing;
         "refund" give back `cost` to every bucket (undoing a take another Redis vetoed, or one
         answered by a replay), and free the slot (slot_id) of every concurrency limit;
         "lease" grant leases, no request attached (an isolate renewing ahead of exhaustion);
         "return" close leases, giving back their unused tokens;
         "release" free the slot (slot_id) of every concurrency limit, the others untouched (a request
         whose response has been delivered, or whose client went away); a slot no longer held
         (expired, or freed already) changes nothing and writes nothing;
         "settle" (token_bucket only) charge a finished request what its origin reported: `delta`
         (below), the signed delta in whole tokens (real cost - the reserve it took; > 0 charges
         more, < 0 gives back, up to the burst). Never refuses: the bucket may go below zero (debt)
ARGV[2]  n, the number of limits
ARGV[3]  override_idx: 0 when the caller passes the overrides in ARGV and no check is wanted;
         "{idx}:{version}" when it passes its isolate's copy of the hash (the usual case), read
         at that version of {key_prefix}:version: the script uses the ARGV values when the
         version it reads in its MGET is the same, else reads the hash at KEYS[idx] itself with
         one HMGET (the copy is behind: the change applies on this very decision); "{idx}"
         alone when the caller has no copy (or the hash is too large to copy): one HMGET. The hash:
         {key_prefix}:{route}:overrides, fields "{limit}:{bucket hash}" (one client) and
         "{limit}:*" (everybody), values "rate:burst:period_ms:until_ms".
ARGV     then per limit i one value for each column of COLUMNS (below, by these names), in that
         order, at 3 + #COLUMNS*(i-1) + 1 ..: each column means one thing whatever the algorithm,
         and a column the limit's algorithm (or the mode) does not read is sent as 0, or "" for the
         ids and the window:
           algo, rate, period_us, burst, cost   (integers; cost <= burst is checked at load)
           shadow      1: decide and report, but never block the request
           share_idx   index in KEYS of the share key, 0 for none
           demand_idx  index in KEYS of the demand key, 0 for none
           override_all, override_own  the values of the hash fields "{limit}:*" and
                   "{limit}:{bucket hash}" as the caller knows them ("" for none; ignored when the
                   script reads the hash). The client's own wins over everybody's; one whose until_ms
                   Redis's clock has reached (until_ms <= now_ms) is ignored, so no edge clock
                   decides an expiry.
           lease_ask   tokens wanted for a lease ("take", "lease"); 0 for none
           lease_epoch, lease_granted, lease_left   a lease being closed ("lease", "return"): the
                   epoch (token_bucket) or window (fixed_window) it was granted in, the tokens it
                   was granted and those never spent (given back); lease_epoch 0 for none
           floor       whole tokens (requests, queue places, slots) the request must leave in the
                   bucket: admitted only if the check passes as if it cost `cost + floor` (and a
                   concurrency request only if `1 + floor` slots are free), charged `cost` alone;
                   retry_after_ms is the wait until that holds. 0 for none. The caller computes it
                   from the capacity in ARGV (burst for the buckets, rate for the windows and
                   concurrency); an override or a region's share that changes the capacity scales
                   it: ceil(floor × capacity' / capacity). (The caller's reserve for higher
                   priorities, docs/algorithms.md, "Priorities"; the script knows nothing of priorities.)
           window      fixed_window aligned to a time zone: "start_ms:end_ms:offset_ms", the window
                   of whole days holding the caller's clock (UTC ms; Lua has no zone database), and
                   index × period − start_ms; "" for windows on UTC.
                   Used while start_ms <= now_ms < end_ms and the period is not overridden; else
                   the script floors now_ms + offset_ms to the period (exact without DST, off by at
                   most the DST shift for a window spanning a change). The stored window is the index.
           warmup_us     token_bucket: the warm-up period, µs (0: none)
           max_delay_us  leaky_bucket: the longest wait for the request's first slot, µs
           nodelay       leaky_bucket: 1 takes the queue at once with a wait of 0 (max_delay_us unread)
           slot_id       concurrency: the request's slot id (1-64 of A-Z a-z 0-9 - _; required in
                   every mode but "peek" and "settle")
           entry_id      sliding_log: the request's entry id (likewise; required in "take" and "refund")
           margin_us     sliding_log: the log counts over period + margin_us
           delta         "settle" only: the signed delta in whole tokens (see ARGV[1])
ARGV     last, optional: "clock:{µs}", the caller's clock, used instead of TIME (see Clock)
Returns  { admitted, then eight per limit: allowed, remaining, retry_after_ms, reset_ms, delay_ms,
           leased, lease_ms, lease_epoch, then the version }
           admitted        1 if no enforced (non-shadow) limit refused; then, and only then,
                           every limit that allowed is charged. A refused request takes nothing.
                           Always 1 in "refund", "lease", "return", "release" and "settle" modes.
           allowed         this limit alone would admit the request
           remaining       whole tokens (requests, queue places, free slots) left, after the charge
                           if admitted and after the lease if one was granted, less the floor (what
                           requests with this floor may still take; never below 0)
           retry_after_ms  when refused: ms until the request could pass (-1: never)
           reset_ms        ms until the limit is back to its initial state
           delay_ms        leaky_bucket: how long the request must wait for its slot
           leased          tokens granted to the caller's lease (0: none)
           lease_ms        how long the lease is valid, in Redis time from now
           lease_epoch     what to pass as lease_epoch when closing it
           version         the last KEY's value (0 when absent)
Cost (Upstash bills every command a script runs, EVALSHA included; with a passed clock, no TIME): 1 TIME + 1 MGET of every
      bucket and share key and the version, + 1 SET (or DEL, a bucket back to its initial state)
      per bucket charged (take, when admitted), refunded, leased or closed; a peek or a refusal
      writes nothing. A lease granted in "take" rides on the request's own SET. `split` limits
      add 1 INCRBY of their demand key on take (+1 PEXPIRE when it starts a new count), refusals
      included. A read of the override hash (no copy, or a copy behind the version) adds 1 HMGET.
      So one limit: EVALSHA + TIME + MGET + SET = 4; three limits: 6; a renewal or a return of one lease: 4. A "release" of one slot: 4 (3 when
      the slot had expired already); a refund of a slot likewise. A "settle" of one bucket: 4.
      A sliding_log limit reads with 1 ZRANGEBYSCORE (the sum and the members that left the
      period since the last write; +1 ZRANGE when the key has no sum: a fresh key, or a log from
      before the sum was kept), +1 ZRANGEBYSCORE when refused, +1 ZRANGE for reset_ms unless it
      just took; a take writes 1 ZADD (the member and the sum) + 1 PEXPIRE instead of the SET,
      +1 ZREMRANGEBYSCORE when members left the period: one limit taking is EVALSHA + TIME + MGET
      + ZRANGEBYSCORE + ZADD + PEXPIRE = 6 (7 on a fresh key, 7 when it trims); refused, EVALSHA
      + TIME + MGET + ZRANGEBYSCORE + ZRANGEBYSCORE + ZRANGE = 6. Whatever the cost: a request is
      one member.
]]

-- the clock (see Clock): the caller's when it passes one, else Redis's TIME
local now = tonumber(string.match(ARGV[#ARGV] or '', '^clock:(%d+)$'))
local passed = now ~= nil
if not passed then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now_ms = math.floor(now / 1000)
-- the call's clock; `now` is each limit's own while it is decided (at least its key's last time)
local clock, clock_ms = now, now_ms

-- The ARGV columns of each limit, in their order (see the contract above), read by name. Named
-- once: the TypeScript that writes them builds each limit's ARGV from the same list
-- (DECIDE_LIMIT_COLUMNS, src/features/rate-limit/decision/limit-columns.ts), and a unit test holds
-- the two lists equal.
local COLUMNS = {
  'algo', 'rate', 'period_us', 'burst', 'cost', 'shadow', 'share_idx', 'demand_idx', 'override_all',
  'override_own', 'lease_ask', 'lease_epoch', 'lease_granted', 'lease_left', 'floor', 'window',
  'warmup_us', 'max_delay_us', 'nodelay', 'slot_id', 'entry_id', 'margin_us', 'delta',
}
local COLUMN = {}
for j, name in ipairs(COLUMNS) do COLUMN[name] = j end
-- limit i's value of a column
local function arg(i, name) return ARGV[3 + #COLUMNS * (i - 1) + COLUMN[name]] end

-- token-bucket leases are held per epoch of this length (Redis time); no lease lives longer
local LEASE_MS = 1000
local LEASE_US = LEASE_MS * 1000
-- a lease ends this long before its epoch (or window) does: a give-back sent when it ends, even
-- late, still finds the epoch or window it belongs to
local GRACE_MS = 250
-- no lease shorter than this is granted: it would be given back almost at once
local LEASE_MIN_MS = 250

local function gcd(a, b)
  while b > 0 do a, b = b, a % b end
  return a
end

local function ceil_ms(us) return math.ceil(math.ceil(us) / 1000) end

-- Each algorithm: check(l) fills l.allowed, l.retry (ms) and returns nothing; commit(l) applies
-- the charge (take) or refund; report(l) gives remaining, reset_ms, ttl_ms and the value to store.
-- The leasable ones add left(l) (whole tokens left), grant(l, tokens) (returns lease_ms, epoch)
-- and close(l, epoch, granted, left).

-- both buckets count in exact integer units: one token is `unit` units, `refill` units a µs
local function units(l)
  local g = gcd(l.period, math.max(l.rate, 1))
  l.unit, l.refill = l.period / g, l.rate / g
  l.cap, l.need = l.burst * l.unit, l.cost * l.unit
end

-- token bucket ------------------------------------------------------------------------------
local token = {}

-- the most tokens the bucket may hold now: its capacity, less what live leases hold
local function top(l) return l.cap - l.held - l.held_next end

-- the refill from l.at to `to`, up to top(l)
local function refill_to(l, to)
  l.tokens = math.min(top(l), l.tokens + math.max(0, to - l.at) * l.refill)
  l.at = math.max(l.at, to)
end

-- lease epochs that ended by `to`: the refill runs up to each end with its holding still in
-- place, then the holding is released (its leases have expired in the isolates)
local function release_epochs(l, to)
  while l.held + l.held_next > 0 and (l.epoch + 1) * LEASE_US <= to do
    refill_to(l, (l.epoch + 1) * LEASE_US)
    l.held, l.held_next, l.epoch = l.held_next, 0, l.epoch + 1
  end
end

function token.load(l, raw)
  units(l)
  local stored, stored_unit, last, rest = string.match(raw or '', '^(%-?%d+):(%d+):(%d+)(.*)$')
  -- the clock's floor (see Clock): never before the bucket's last time
  if last then now = math.max(now, tonumber(last)) end
  l.warm, l.held, l.held_next, l.epoch = 0, 0, 0, math.floor(now / LEASE_US)
  local warm = string.match(rest or '', '^:(%d+)$') or ''
  local epoch, held, held_next = string.match(rest or '', '^:L(%d+):(%d+):(%d+)$')
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
  held, held_next = tonumber(held or 0), tonumber(held_next or 0)
  if stored_unit ~= l.unit then
    -- the limit (or this region's share of it) changed: keep whole tokens, in the new units
    -- (what leases hold is rounded up: holding less than was leased could pass the burst)
    tokens = math.floor(tokens / stored_unit) * l.unit
    held, held_next = math.ceil(held / stored_unit) * l.unit, math.ceil(held_next / stored_unit) * l.unit
  end
  -- a clock that went backwards (failover) refills nothing rather than a negative amount
  local t1 = tonumber(last)
  local t2 = math.max(t1, now)
  if warm ~= '' and tonumber(warm) > 0 and l.warmup > 0 then
    -- during warm-up the rate climbs from rate/3 to rate: integrate it over [t1, t2]
    local s, w = tonumber(warm), l.warmup
    local a, b = math.min(t1 - s, w), math.min(t2 - s, w)
    local added = l.refill * ((b - a) / 3 + (b * b - a * a) / (3 * w) + math.max(0, (t2 - s) - math.max(t1 - s, w)))
    if t2 - s < w then l.warm = s end
    l.tokens = math.min(l.cap, tokens + math.floor(added))
    return
  end
  l.tokens, l.at = tokens, t1
  if epoch then l.held, l.held_next, l.epoch = held, held_next, tonumber(epoch) end
  release_epochs(l, t2)
  refill_to(l, t2)
  if l.held + l.held_next == 0 then l.epoch = math.floor(t2 / LEASE_US) end
end
-- µs until the bucket holds `need` units, nothing else arriving (the holdings released as their epochs end)
local function token_wait(l)
  local s = { tokens = l.tokens, at = now, held = l.held, held_next = l.held_next, epoch = l.epoch, cap = l.cap, refill = l.refill }
  while l.need > top(s) do
    local before = s.held + s.held_next
    release_epochs(s, (s.epoch + 1) * LEASE_US)
    if s.held + s.held_next == before then break end
  end
  return math.max(0, s.at - now) + (l.need - math.min(l.need, s.tokens)) / l.refill
end
function token.check(l)
  l.allowed = (l.rate > 0 and l.need <= l.cap and l.tokens >= l.need) and 1 or 0
  if l.allowed == 0 then
    if l.rate == 0 or l.need > l.cap then l.retry = -1
    elseif l.warm > 0 then
      l.retry = ceil_ms((l.need - l.tokens) / (l.refill * (1 / 3 + 2 / 3 * math.min(1, (now - l.warm) / l.warmup))))
    else
      l.retry = ceil_ms(token_wait(l))
    end
  end
end
function token.commit(l, sign)
  l.tokens = math.min(top(l), l.tokens - sign * l.need)
end
-- "settle": what the origin reported, less the reserve taken; a debt (tokens < 0) is allowed
function token.settle(l, delta)
  l.tokens = math.min(top(l), l.tokens - delta * l.unit)
end
function token.left(l) return math.floor(l.tokens / l.unit) end
function token.grant(l, tokens)
  -- no lease on a clock that went backwards past an epoch: its epochs would not be now's
  if l.warmup > 0 or math.floor(now / LEASE_US) ~= l.epoch then return 0, 0 end
  -- this epoch's, unless too little of it is left: then the next one's
  local next_epoch = (l.epoch + 1) * LEASE_US - GRACE_MS * 1000 - now < LEASE_MIN_MS * 1000
  l.tokens = l.tokens - tokens * l.unit
  if next_epoch then l.held_next = l.held_next + tokens * l.unit else l.held = l.held + tokens * l.unit end
  local epoch = l.epoch + (next_epoch and 1 or 0)
  return math.floor(((epoch + 1) * LEASE_US - GRACE_MS * 1000 - now) / 1000), epoch
end
function token.close(l, epoch, granted, left)
  -- a lease whose epoch has ended was released with it, and the refill has replaced its tokens
  -- since: what it gives back now is dropped (added on top of that refill, it could pass the burst)
  if epoch == l.epoch then l.held = math.max(0, l.held - granted * l.unit)
  elseif epoch == l.epoch + 1 then l.held_next = math.max(0, l.held_next - granted * l.unit)
  else return end
  l.tokens = math.max(l.tokens, math.min(top(l), l.tokens + left * l.unit))
end
function token.report(l)
  local held = l.held + l.held_next
  local reset = l.refill > 0 and ceil_ms((l.cap - l.tokens) / l.refill) or 0
  -- with leases held, full no later than when the last holding is released plus a full refill
  if held > 0 then reset = reset + ceil_ms((l.epoch + (l.held_next > 0 and 2 or 1)) * LEASE_US - now) end
  local value = string.format('%d:%d:%d', l.tokens, l.unit, now)
  if l.warm > 0 then value = value .. string.format(':%d', l.warm)
  elseif held > 0 then value = value .. string.format(':L%d:%d:%d', l.epoch, l.held, l.held_next) end
  return math.floor(l.tokens / l.unit), reset, math.max(reset, l.warmup > 0 and ceil_ms(l.warmup) or 0), value, l.tokens >= l.cap and l.warmup == 0 and held == 0
end

-- leaky bucket ------------------------------------------------------------------------------
local leaky = {}
function leaky.load(l, raw)
  units(l)
  l.level = 0
  local level, stored_unit, last = string.match(raw or '', '^l:(%d+):(%d+):(%d+)$')
  if level then
    -- the clock's floor (see Clock): never before the bucket's last time
    now = math.max(now, tonumber(last))
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
  if stored_w and stored_w > l.w then l.w, l.e, l.behind = stored_w, 0, true end
end

-- a window aligned to a time zone (`window` "start_ms:end_ms:offset_ms", the caller's, from its
-- zone database): that window while Redis's clock is in it and the period is the one it was
-- computed for; else (an isolate's clock on the other side of a boundary, an override's period)
-- windows of the period floored on this clock shifted by the offset, which is exact for a zone
-- without DST and off by at most the DST shift for the window spanning a change
local function zone_window_of(l, stored_w)
  local s, e, off = string.match(l.window, '^(%-?%d+):(%-?%d+):(%-?%d+)$')
  s, e, off = tonumber(s), tonumber(e), tonumber(off)
  l.p = l.period / 1000
  if s and l.period == l.asked_period and now_ms >= s and now_ms < e then
    -- s + off is the window's index × its period, exactly
    l.w, l.p, l.e = math.floor((s + off) / l.p), e - s, now_ms - s
  else
    local shifted = now_ms + (off or 0)
    l.w = math.floor(shifted / l.p)
    l.e = shifted - l.w * l.p
  end
  if stored_w and stored_w > l.w then l.w, l.e, l.behind = stored_w, 0, true end
end

local fixed = {}
function fixed.load(l, raw)
  local count, w = string.match(raw or '', '^f:(%d+):(%d+)$')
  if l.window ~= '' then zone_window_of(l, tonumber(w)) else window_of(l, tonumber(w)) end
  l.count = (count and tonumber(w) == l.w) and tonumber(count) or 0
end
function fixed.check(l)
  l.allowed = (l.count + l.cost <= l.rate) and 1 or 0
  if l.allowed == 0 then l.retry = l.cost > l.rate and -1 or (l.p - l.e) end
end
function fixed.commit(l, sign)
  l.count = math.max(0, l.count + sign * l.cost)
end
function fixed.left(l) return math.max(0, l.rate - l.count) end
function fixed.grant(l, tokens)
  -- the lease ends with its window; on a clock that went backwards the window's end is unknown
  -- ms to the window's end less the grace, counted from now in µs, rounded down
  local ms = math.floor(((now_ms - l.e + l.p) * 1000 - GRACE_MS * 1000 - now) / 1000)
  if l.behind or ms < LEASE_MIN_MS then return 0, 0 end
  l.count = l.count + tokens
  return math.min(ms, LEASE_MS), l.w
end
function fixed.close(l, window, _, left)
  if window == l.w then l.count = math.max(0, l.count - left) end
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

-- in flight (concurrency) -----------------------------------------------------------------
-- `rate` slots, each held for at most `period` µs; l.slots lists the live ones as { id, expiry_us }
local inflight = {}
function inflight.load(l, raw)
  l.slots = {}
  for id, expiry in string.gmatch(string.match(raw or '', '^c:(.*)$') or '', '([^,@]+)@(%d+)') do
    expiry = tonumber(expiry)
    if expiry > now then l.slots[#l.slots + 1] = { id, expiry } end
  end
end
function inflight.check(l)
  local live, need = #l.slots, 1 + l.floor
  l.allowed = (live + need <= l.rate) and 1 or 0
  if l.allowed == 0 then
    if l.rate <= 0 or need > l.rate then l.retry = -1 return end
    -- room comes when the (live + need - rate)-th soonest slot expires, if none is released before
    local expiries = {}
    for j, slot in ipairs(l.slots) do expiries[j] = slot[2] end
    table.sort(expiries)
    l.retry = ceil_ms(expiries[live + need - l.rate] - now)
  end
end
-- removes the caller's slot; returns whether it was there
local function drop_slot(l)
  for j, slot in ipairs(l.slots) do
    if slot[1] == l.slot then
      table.remove(l.slots, j)
      return true
    end
  end
  return false
end
function inflight.commit(l, sign)
  local dropped = drop_slot(l)
  if sign > 0 then
    -- the clock's floor (see Clock): a slot taken now expires no earlier than one taken before it
    local expiry = now + l.period
    for _, slot in ipairs(l.slots) do expiry = math.max(expiry, slot[2]) end
    l.slots[#l.slots + 1] = { l.slot, expiry }
  end
  return sign > 0 or dropped
end
function inflight.report(l)
  local parts, last = {}, now
  for j, slot in ipairs(l.slots) do
    parts[j] = slot[1] .. '@' .. string.format('%d', slot[2])
    last = math.max(last, slot[2])
  end
  local reset = ceil_ms(last - now)
  return math.max(0, l.rate - #l.slots), reset, reset, 'c:' .. table.concat(parts, ','), #l.slots == 0
end

-- sliding log -----------------------------------------------------------------------------
-- The bucket's key is a sorted set: one member per admitted request still in the period,
-- "{entry}*{cost}" (`entry` the request's id, entry_id) scored by its time in µs, and beside them the
-- running sum of every member's cost, the member SUM scored by minus that sum (<= 0, so below
-- every time: the ranges of times start at "(0"). One member per request, whatever its cost: a
-- request of cost 10,000 is one member, not 10,000 (issue 29, finding 6). The sum keeps a
-- decision's reads bounded: the live cost is the sum less the members that have left the period
-- since the last write (read with the sum in one ZRANGEBYSCORE, and trimmed by the next write),
-- never a walk over the live ones. A member "{entry}:{j}" is one unit of a log written before
-- the sum was kept (cost 1); a log without SUM is summed once, whole, and gets it on its next write.
-- A refund removes the request's own member; the key expires with its newest member.
local slog = {}
local SUM = '#sum'
-- a member's cost: "{entry}*{cost}", or a unit of an older log
local function member_cost(m) return tonumber(string.match(m, '%*(%d+)$')) or 1 end
function slog.load(l, raw, key)
  l.key, l.added = key, false
  l.member = l.entry .. '*' .. l.cost
  -- the clock's floor (see Clock), for a passed clock: never before the log's newest member
  if passed and not raw then
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
    if newest then now = math.max(now, tonumber(newest)) end
  end
  -- the log counts over the period and its margin: the spread of the delay between this decision
  -- and the origin's arrival, so the origin sees at most `rate` in any period of its own
  l.span = l.period + l.margin
  l.cutoff = string.format('%d', now - l.span)
  -- a string there is another algorithm's state (the limit was reconfigured): an empty log, replaced on write
  l.foreign = raw and true or false
  l.count, l.gone, l.has_sum = 0, 0, false
  if l.foreign then return end
  -- SUM first (its score is the lowest), then the members that have left the period
  local rows, sum, left = redis.call('ZRANGEBYSCORE', key, '-inf', l.cutoff, 'WITHSCORES'), nil, 0
  for j = 1, #rows, 2 do
    if rows[j] == SUM then sum = -tonumber(rows[j + 1])
    else left, l.gone = left + member_cost(rows[j]), l.gone + 1 end
  end
  l.has_sum = sum ~= nil
  if not sum then
    -- no running sum (a fresh key, or a log from before it was kept): every member, once
    sum = 0
    local all = redis.call('ZRANGE', key, 0, -1)
    for j = 1, #all do sum = sum + member_cost(all[j]) end
  end
  l.count = sum - left
end
function slog.check(l)
  l.allowed = (l.count + l.cost <= l.rate) and 1 or 0
  if l.allowed == 1 then return end
  if l.cost > l.rate then l.retry = -1 return end
  -- room comes when the oldest live members holding count + cost - rate have left the period:
  -- each holds at least 1, so that many members at most
  local must = l.count + l.cost - l.rate
  local rows = redis.call('ZRANGEBYSCORE', l.key, '(' .. l.cutoff, '+inf', 'WITHSCORES', 'LIMIT', 0, must)
  local freed, at = 0, now
  for j = 1, #rows, 2 do
    freed, at = freed + member_cost(rows[j]), tonumber(rows[j + 1])
    if freed >= must then break end
  end
  l.retry = ceil_ms(math.max(0, at + l.span - now))
end
-- take (sign > 0): adds the request's member at now; refund: removes it. Either trims the
-- members that have left the period and keeps SUM equal to the cost of the members kept.
-- Returns whether it wrote.
function slog.commit(l, sign)
  local wrote = false
  if l.foreign then
    if sign < 0 then return false end
    redis.call('DEL', l.key)
    l.has_sum = false
  elseif l.gone > 0 then
    redis.call('ZREMRANGEBYSCORE', l.key, '(0', l.cutoff)
    wrote = true
  end
  if sign > 0 and l.cost > 0 then
    -- the member and the new sum in one ZADD; it answers how many members are new
    local new = redis.call('ZADD', l.key, string.format('%d', now), l.member, string.format('%d', -(l.count + l.cost)), SUM)
    l.added = true
    if new == (l.has_sum and 1 or 2) then
      l.count = l.count + l.cost
      return true
    end
    -- the entry was live in the log already (an id used twice): moved to now, counted once
    wrote = true
  elseif sign < 0 and redis.call('ZREM', l.key, l.member) == 1 then
    l.count, wrote = l.count - l.cost, true
  end
  -- the sum of what is kept (an empty log is deleted by the caller instead)
  if wrote and l.count > 0 then redis.call('ZADD', l.key, string.format('%d', -l.count), SUM) end
  return wrote or sign > 0
end
function slog.report(l)
  local reset = 0
  if l.count > 0 then
    -- the newest member leaves the period last: this request's when it was just added (a member
    -- scored later, from a clock that has since gone backwards, expires with the key: early by
    -- at most that clock error)
    local newest = l.added and now or tonumber(redis.call('ZRANGE', l.key, -1, -1, 'WITHSCORES')[2])
    reset = ceil_ms(math.max(0, newest + l.span - now))
  end
  return math.max(0, l.rate - l.count), reset, reset, nil, l.count == 0
end
-- the main loop stores nothing for it (commit wrote the members): the key's TTL only
function slog.expire(l, ttl_ms) redis.call('PEXPIRE', l.key, ttl_ms) end

local algorithms = { token, leaky, fixed, sliding, inflight, slog }

-- the check of a request that must leave l.floor whole tokens behind: as if it cost that much more
-- (concurrency reads l.floor itself); the charge stays `cost`
local function check(l)
  local cost, need = l.cost, l.need
  if l.floor > 0 and l.algo ~= inflight then
    l.cost = cost + l.floor
    if need then l.need = need + l.floor * l.unit end
  end
  l.algo.check(l)
  l.cost, l.need = cost, need
end

-- the floor scaled to the capacity the limit is decided with (an override's, a region's share)
local function scale_floor(l, capacity)
  local now_capacity = (l.algo == token or l.algo == leaky) and l.burst or l.rate
  if l.floor > 0 and capacity > 0 and now_capacity ~= capacity then
    l.floor = math.ceil(l.floor * now_capacity / capacity)
  end
end

-- the call, step by step -------------------------------------------------------------------

-- limit i's columns, as the fields the algorithms read (nothing read from Redis yet)
local function read_args(i)
  local l = {
    algo = algorithms[tonumber(arg(i, 'algo'))],
    rate = tonumber(arg(i, 'rate')), period = tonumber(arg(i, 'period_us')), burst = tonumber(arg(i, 'burst')), cost = tonumber(arg(i, 'cost')),
    shadow = arg(i, 'shadow') == '1', share_idx = tonumber(arg(i, 'share_idx')), demand_idx = tonumber(arg(i, 'demand_idx')),
    override_all = arg(i, 'override_all'), override_own = arg(i, 'override_own'),
    ask = tonumber(arg(i, 'lease_ask')), close_epoch = tonumber(arg(i, 'lease_epoch')), close_granted = tonumber(arg(i, 'lease_granted')), close_left = tonumber(arg(i, 'lease_left')),
    floor = tonumber(arg(i, 'floor')), window = arg(i, 'window'),
    warmup = tonumber(arg(i, 'warmup_us')), max_delay = tonumber(arg(i, 'max_delay_us')), nodelay = tonumber(arg(i, 'nodelay')),
    slot = arg(i, 'slot_id'), entry = arg(i, 'entry_id'), margin = tonumber(arg(i, 'margin_us')), delta = tonumber(arg(i, 'delta')),
    retry = 0, delay = 0,
  }
  l.asked_period = l.period
  l.split = l.share_idx > 0 or l.demand_idx > 0
  return l
end

-- a concurrency limit's slot id, a sliding log's entry id, is part of its bucket's value: checked,
-- in the modes that use it, before anything is read or written. Returns the error, if any.
local function valid_id(id) return #id <= 64 and string.match(id, '^[%w_%-]+$') end
local function check_ids(limits, how)
  for i, l in ipairs(limits) do
    if l.algo == inflight and how.slot and not valid_id(l.slot) then
      return 'decide.lua: limit ' .. i .. ' (concurrency) needs a slot id of 1-64 letters, digits, "-" or "_"'
    end
    if l.algo == slog and how.entry and not valid_id(l.entry) then
      return 'decide.lua: limit ' .. i .. ' (sliding_log) needs an entry id of 1-64 letters, digits, "-" or "_"'
    end
  end
end

-- every read in one MGET: the buckets (KEYS 1..n), then the shares of split limits (l.share_at:
-- where its share is in the reply), then the version. Returns the values and the version.
local function read_keys(limits)
  local reads = {}
  for i = 1, #limits do reads[i] = KEYS[i] end
  for _, l in ipairs(limits) do
    if l.share_idx > 0 then
      reads[#reads + 1] = KEYS[l.share_idx]
      l.share_at = #reads
    end
  end
  reads[#reads + 1] = KEYS[#KEYS]
  local stored = redis.call('MGET', unpack(reads))
  return stored, tonumber(stored[#reads]) or 0
end

-- runtime overrides set through the admin API: the values the caller knows, or, when it has no
-- copy (or the hash is too large to copy) or its copy was read at another version than the one
-- just read, one HMGET of both fields of every limit. Returns { rate, burst, period_us } by limit.
local function read_overrides(limits, version)
  local n, values, override = #limits, {}, {}
  local idx, copy_version = string.match(ARGV[3], '^(%d+):?(%d*)$')
  local ov_idx = tonumber(idx)
  if ov_idx > 0 and (copy_version == '' or tonumber(copy_version) ~= version) then
    local fields = {}
    for i = 1, n do
      local name, hash = string.match(KEYS[i], ':([^:]+):([^:]+)$')
      -- everybody's first, the client's own second (it wins below); the short field first also
      -- keeps Redis's argument cache from handing the later SET a needlessly large allocation
      fields[2 * i - 1], fields[2 * i] = name .. ':*', name .. ':' .. hash
    end
    values = redis.call('HMGET', KEYS[ov_idx], unpack(fields))
  else
    for i, l in ipairs(limits) do values[2 * i - 1], values[2 * i] = l.override_all, l.override_own end
  end
  for j = 1, 2 * n do
    local r, b, p, u = string.match(values[j] or '', '^(%d+):(%d+):(%d+):(%d+)$')
    if r and tonumber(u) > now_ms then
      override[math.ceil(j / 2)] = { tonumber(r), tonumber(b), tonumber(p) * 1000 }
    end
  end
  return override
end

-- limit i at the call's clock (its load may raise `now` to its key's last time, kept in l.now),
-- with its override or its region's share, its split demand counted ("take": every attempt,
-- refused ones too; the rebalancer reads and resets it with GETDEL), and checked in a deciding mode
local function load_limit(l, i, how, stored, override)
  now, now_ms = clock, clock_ms
  local capacity = (l.algo == token or l.algo == leaky) and l.burst or l.rate
  if override then l.rate, l.burst, l.period = unpack(override) end
  if l.share_at then
    local r, b = string.match(stored[l.share_at] or '', '^(%d+):(%d+)$')
    if r then l.rate, l.burst = tonumber(r), tonumber(b) end
  end
  if how.demand and l.demand_idx > 0 then
    if redis.call('INCRBY', KEYS[l.demand_idx], l.cost) == l.cost then redis.call('PEXPIRE', KEYS[l.demand_idx], 3600000) end
  end
  scale_floor(l, capacity)
  l.algo.load(l, stored[i], KEYS[i])
  l.now, now_ms = now, math.floor(now / 1000)
  if how.decides then check(l) else l.allowed = 1 end
end

-- pass 1: every limit loaded, and whether each would admit. Returns admitted (1: no enforced
-- limit refused; always 1 in the modes that do not decide)
local function load_limits(limits, how, stored, override)
  local admitted = 1
  for i, l in ipairs(limits) do
    load_limit(l, i, how, stored, override[i])
    if l.allowed == 0 and not l.shadow then admitted = 0 end
  end
  return admitted
end

-- A lease for limit l, if it may have one and enough is left: debits it and returns
-- leased, lease_ms, lease_epoch (zeros for none)
local function lease(l)
  if l.ask <= 0 or l.shadow or l.split or not l.algo.grant or l.rate <= 0 then return 0, 0, 0 end
  local capacity = l.algo == token and l.burst or l.rate
  local left = l.algo.left(l)
  if left < math.max(math.ceil(capacity / 4), l.cost) then return 0, 0, 0 end
  local tokens = math.min(l.ask, math.floor(left / 4))
  if tokens <= 0 then return 0, 0, 0 end
  local ms, epoch = l.algo.grant(l, tokens)
  if ms <= 0 then return 0, 0, 0 end
  return tokens, ms, epoch
end

-- pass 2 for limit i: the mode's change (how.act, which says whether it changed the key), the
-- lease, then the key written: a value's SET, a log's PEXPIRE, or a DEL (back to its initial state)
local function write_limit(l, i, how, admitted)
  now, now_ms = l.now, math.floor(l.now / 1000)
  local write = how.act(l, admitted)
  l.leased, l.lease_ms, l.lease_epoch = 0, 0, 0
  if how.leases and admitted == 1 then l.leased, l.lease_ms, l.lease_epoch = lease(l) end
  if l.leased > 0 then write = true end
  local remaining, reset_ms, ttl_ms, value, empty = l.algo.report(l)
  l.remaining, l.reset_ms = remaining, reset_ms
  -- the one TTL expression (the test clock extends it): a value's PX, or a log's PEXPIRE
  local px = { 'PX', math.max(1, ttl_ms) }
  if write then
    if empty then redis.call('DEL', KEYS[i])
    elseif l.algo.expire then l.algo.expire(l, px[2])
    else redis.call('SET', KEYS[i], value, unpack(px)) end
  end
end

-- the reply (see Returns): admitted, eight figures per limit, the version
local function reply(limits, admitted, version)
  local out = { admitted }
  for i, l in ipairs(limits) do
    local o = 1 + 8 * (i - 1)
    out[o + 1] = l.allowed
    -- what requests like this one may still take: the floor is not theirs
    out[o + 2] = math.max(0, l.remaining - l.floor)
    out[o + 3] = l.retry
    out[o + 4] = l.reset_ms
    out[o + 5] = (admitted == 1 and not l.shadow) and l.delay or 0
    out[o + 6] = l.leased
    out[o + 7] = l.lease_ms
    out[o + 8] = l.lease_epoch
  end
  out[#out + 1] = version
  return out
end

-- the modes -------------------------------------------------------------------------------
-- What each changes in limit l once every limit is loaded; returns whether l's key must be written.
local function charge(l, admitted) -- "take": only if admitted
  local charged = admitted == 1 and l.allowed == 1
  if charged then l.algo.commit(l, 1) end
  return charged
end
-- "refund", "release" (a slot or an entry that expired meanwhile leaves nothing to write)
local function give_back(l) return l.algo.commit(l, -1) ~= false end
local function free_slot(l) return l.algo == inflight and give_back(l) end
local function close_lease(l) -- "lease", "return": the lease passed, if any
  local closing = l.close_epoch > 0 and l.algo.close ~= nil
  if closing then l.algo.close(l, l.close_epoch, l.close_granted, l.close_left) end
  return closing
end
local function settle_delta(l) -- "settle"
  local settling = l.algo.settle ~= nil and l.delta ~= 0
  if settling then l.algo.settle(l, l.delta) end
  return settling
end
local function change_nothing() return false end

-- decides: checks each limit (the others admit by definition); slot, entry: needs the request's
-- slot_id, entry_id; demand: counts split demand; leases: grants the leases asked for (in "take",
-- only when admitted); act: what it changes (above)
local MODES = {
  take = { decides = true, slot = true, entry = true, demand = true, leases = true, act = charge },
  peek = { decides = true, act = change_nothing },
  refund = { slot = true, entry = true, act = give_back },
  lease = { slot = true, leases = true, act = close_lease },
  ['return'] = { slot = true, act = close_lease },
  release = { slot = true, act = free_slot },
  settle = { act = settle_delta },
}

-- one call in the mode `how`: read, load and decide every limit (pass 1), then change, write and reply (pass 2)
local function run(how)
  local limits = {}
  for i = 1, tonumber(ARGV[2]) do limits[i] = read_args(i) end
  local bad = check_ids(limits, how)
  if bad then return redis.error_reply(bad) end
  local stored, version = read_keys(limits)
  local admitted = load_limits(limits, how, stored, read_overrides(limits, version))
  for i, l in ipairs(limits) do write_limit(l, i, how, admitted) end
  return reply(limits, admitted, version)
end

local how = MODES[ARGV[1]]
if not how then return redis.error_reply('decide.lua: unknown mode "' .. tostring(ARGV[1]) .. '"') end
return run(how)
