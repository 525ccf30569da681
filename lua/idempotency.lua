#!lua flags=allow-key-locking
--[[
idempotency.lua: one side effect per idempotency key. Claims, completions, releases and
resolutions of a key, each one atomic call that checks who owns the claim; every outcome is
appended to the ledger. The clock is Redis's own (TIME, read once), unless the caller passes its
own: a Redis that refuses TIME in scripts gets the isolate's clock as the last ARGV, "clock:{µs}"
(src/store/clock.ts; lua/decide.lua, Clock). Whichever clock it is, no key's state goes back in
time: a fencing token is max(last + 1, clock) (strictly rising whatever the clock does), a replay
bucket is paid from max(paid, clock), and a renewal never moves lease_until earlier than it is.

KEYS[1]  record   {key_prefix}:idem:{route}:{sha256(principal, key)}  hash:
                    state        inflight | completed | indeterminate
                    owner        the id of the request that holds the claim; `job:…` for a queued job
                    fence        its fencing token
                    fp           the request fingerprint (method, path, query, principal, body hash)
                    lease_until  ms (Redis time) until which the holder is known to be alive
                    life_until   ms (Redis time) until which the holder's call may still run, renewed
                                 or not: its longest life, told at the claim (a live call's
                                 origin_timeout, late-answer wait and settling; a queued job's
                                 life), moved on by start (the delivery's) and park (the job's)
                    ttl          ms the key is kept once its outcome is known (the claim's ttl)
                    sent         1 once a queued job's delivery started (op start); cleared by park
                    lapsed       1 when the key became indeterminate because its lease lapsed
                    key          the key itself, on a route that reconciles (lua/reconcile.lua)
                    reconcile_tries, reconcile_next   failed reconciliations, and when (ms) the
                                 next may be (lua/reconcile.lua)
                    status, headers, body, stored   the origin's answer (completed)
                  TTL: while in flight, until the later of lease_until and life_until, plus `ttl`,
                  moved with every renewal: the record outlives its claim and its call, so a claim
                  whose holder vanished or lost Redis is found (and held indeterminate), never
                  missing while the call may still run. Once the outcome is known (completed,
                  indeterminate by hold), `ttl` from then: a key is kept `ttl` after its answer.
                  A lapsed lease (the holder stopped renewing: it died, or lost Redis) makes the key
                  indeterminate, as the holder may have forwarded the request before it vanished;
                  the lapsed record is kept until life_until plus `ttl` (at least `ttl`), and the
                  holder's renewals, should they reach Redis again, keep it `lease` plus `ttl` from
                  each. Only a queued job's claim whose delivery never started (`job:` owner, no
                  `sent`) is taken over, as its consumer delivers only after `start` (nothing
                  reached the origin). The holder of a lapsed claim may still complete, release or
                  hold it.
KEYS[2]  fence    {key_prefix}:idem:{route}:fence  the route's last fencing token: every grant gets
                  max(last + 1, Redis time in µs), so tokens rise strictly however the key is shared,
                  and still rise after it expired (one key per route, whatever clients send).
                  TTL 30 days, renewed on every grant.
KEYS[3]  ledger   {key_prefix}:ledger  stream, capped (MAXLEN ~)
KEYS[4]  replays  {key_prefix}:idem:{route}:replays:{sha256(principal)}  (claim only) the principal's
                  replay bucket, GCRA: the Redis time in µs its replays are paid up to. Written only
                  when a claim answers from a completed key. TTL: until the bucket is full again.
KEYS[5]  replays  {key_prefix}:idem:{route}:replays:{sha256(client address as principal "ip")}
                  (claim only) the client address's replay bucket, the same GCRA at the same bound:
                  a replay is paid from both buckets or from neither, so principals a client invents
                  (`auto` takes any Authorization value) do not multiply its replays. The same key
                  as KEYS[4] when the principal is the address (paid once); KEYS[4] again for the
                  ops that never claim.
KEYS[6]  index    {key_prefix}:idem:{route}:indeterminate  sorted set: the route's indeterminate keys
                  (ARGV[4], the key hash) by when they became so (ms): joined by `hold` and a lapse,
                  left by a resolution and by a lapsed claim's holder settling it (lua/reconcile.lua
                  works through it). TTL 30 days, renewed whenever a key joins.
ARGV[1]  op: claim | renew | start | park | complete | release | release_unsent | hold | resolve_release
         | resolve_replay | read
ARGV[2]  owner (claim, renew, start, park, complete, release, release_unsent, hold)
ARGV[3]  route name, ARGV[4] key hash (for the ledger), ARGV[5] ledger max length
ARGV[6..] per op, then, always last (but for a passed clock), the ledger context: JSON { trace, principal,
  session, latency_ms, tool } (the request's traceparent, hashes, the origin's latency, an MCP call's tool), written beside
  each ledger entry of this call; what does not decode as such an object adds nothing.
ARGV[6..argc-1] per op (argc: #ARGV, less the clock when one is passed):
  claim           fp, lease_ms, ttl_ms, replay_interval_us, replay_burst, life_ms (the call's
                  longest life from now: the record is kept at least that long plus ttl_ms),
                  key ("" or, on a route that reconciles, the key itself, kept as `key`: the
                  origin is asked about it by name)
  renew           lease_ms: the holder's claim cannot lapse for that long from now; a lapsed
                  claim's holder keeps its record `lease` plus `ttl` from now (it stays indeterminate)
  start           lease_ms, life_ms: a queued job's delivery begins (refused once started: a
                  redelivered copy never sends it twice); the lease becomes the delivery's, renewed as
                  live ones, and the record is kept at least the delivery's life plus ttl
  park            lease_ms: a job whose delivery failed without effect (5xx) waits for its retry:
                  not started again, held that long (its life moved on as far)
  complete        status, headers (JSON), body (base64), stored (1|0), ttl_ms
  release, hold   origin status ("" for a network error)
  release_unsent  "": gives the key back only if nothing of it can have reached the origin: the
                  holder's claim (in flight or lapsed) not marked `sent`. A queued job's copy that
                  never ran, or a claim whose reply was lost before its request was forwarded. A
                  claim marked `sent` is left as it is (its lease runs out into indeterminate).
  resolve_replay  status, headers, body, ttl_ms
  resolve_release ""
then, optional, the very last: "clock:{µs}", the caller's clock, used instead of TIME
Returns  claim:     { "claimed", fence, takeover (0|1) } | { "mismatch" } | { "inflight", lease_left_ms, fence }
                    | { "completed", status, headers, body, stored } | { "indeterminate", fence, busy }
                    (busy 1: a lapsed claim whose call may still run: never reconciled yet)
                    | { "replay_limited", retry_after_ms }  (completed, but the principal's replays are spent)
         renew, park, complete, release, hold: { "ok" } | { "not_owner" } (renewals are not in the ledger)
                    (complete is "ok" again for the holder of a key it completed already: a retry
                    of a completion whose reply was lost)
         start:     { "ok" } | { "not_owner" } | { "sent" } (this job's delivery started already)
         release_unsent: { "ok" } | { "sent" } (left held) | { "not_owner" } (not ledgered: the
                    caller may never have held it)
         resolve_*: { "ok" } | { "absent" }
         read:      { state or "absent", fence, status, lease_left_ms }
]]

-- the clock: the caller's when it passes one (the last ARGV), else Redis's TIME
local now_us = tonumber(string.match(ARGV[#ARGV] or '', '^clock:(%d+)$'))
-- the caller's own ARGV, the clock aside
local argc = now_us and #ARGV - 1 or #ARGV
if not now_us then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now = math.floor(now_us / 1000)

local op, owner, route, keyhash, maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local rec = KEYS[1]

local context = {}
do
  local ok, decoded = pcall(cjson.decode, ARGV[argc])
  if ok and type(decoded) == 'table' then context = decoded end
end

local function ledger(event, fence, status)
  local fields = { 'event', event, 'route', route, 'key', keyhash, 'fence', tostring(fence or ''),
    'status', tostring(status or ''), 'at', tostring(now) }
  for _, name in ipairs({ 'trace', 'principal', 'session', 'latency_ms', 'tool' }) do
    local v = context[name]
    if type(v) == 'string' and v ~= '' then
      fields[#fields + 1] = name
      fields[#fields + 1] = v
    end
  end
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*', unpack(fields))
end

-- tokens have 16 digits (µs since 1970): written with %d, as tostring keeps only 14 (%.14g)
local function int(n)
  return string.format('%d', n)
end

local function next_fence()
  local fence = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, now_us)
  redis.call('SET', KEYS[2], int(fence), 'PX', 2592000000)
  return fence
end

-- GCRA over the replay buckets, the principal's (KEYS[4]) and the client address's (KEYS[5], when
-- another key): a replay is due `interval` µs after the last one paid; at most `burst` may be paid
-- ahead of now. Paid from both or neither. Returns 0 (the replay is paid for) or the ms until the
-- next one may be (the longer of the two waits).
local function pay_replay(interval, burst)
  local buckets = { KEYS[4] }
  if KEYS[5] and KEYS[5] ~= KEYS[4] then buckets[2] = KEYS[5] end
  local last, due, early = redis.call('MGET', unpack(buckets)), {}, 0
  for i = 1, #buckets do
    due[i] = math.max(tonumber(last[i]) or 0, now_us) + interval
    early = math.max(early, due[i] - now_us - burst * interval)
  end
  if early > 0 then return math.ceil(early / 1000) end
  for i, key in ipairs(buckets) do
    local paid = due[i]
    redis.call('SET', key, int(paid), 'PX', int(math.ceil((paid - now_us) / 1000)))
  end
  return 0
end

-- how long from now the holder's call may still run (0 once past, or for a record without a life)
local function life_left()
  return math.max(0, (tonumber(redis.call('HGET', rec, 'life_until')) or 0) - now)
end

-- never shortens the record's TTL: a key is kept at least as long as it was promised
local function keep_at_least(ms)
  redis.call('PEXPIRE', rec, math.max(ms, redis.call('PTTL', rec)))
end

-- an in-flight record outlives its lease and its call by the key's ttl: a claim whose holder
-- vanished or lost Redis is still there to be found (indeterminate) while its call may run
local function hold_for(lease, floor)
  local held = math.max(floor or 0, now + lease) - now
  redis.call('HSET', rec, 'lease_until', now + held)
  local keep = tonumber(redis.call('HGET', rec, 'ttl'))
  -- (a record claimed before `ttl` was a field keeps its TTL, at least the lease)
  redis.call('PEXPIRE', rec, keep and math.max(held, life_left()) + keep or math.max(held, redis.call('PTTL', rec)))
end

-- the holder's call may run `life` more from now: its record is kept at least that long plus ttl
local function live_until(life)
  if not life or life <= 0 then return end
  local until_ = math.max(tonumber(redis.call('HGET', rec, 'life_until')) or 0, now + life)
  redis.call('HSET', rec, 'life_until', until_)
end

-- the key joins (or leaves) the route's indeterminate keys, which reconciliation works through
local function index()
  if not KEYS[6] then return end
  redis.call('ZADD', KEYS[6], now, keyhash)
  redis.call('PEXPIRE', KEYS[6], 2592000000)
end
local function unindex()
  if KEYS[6] then redis.call('ZREM', KEYS[6], keyhash) end
end

local function grant(fp, lease, ttl, life, event, key)
  local fence = next_fence()
  redis.call('DEL', rec)
  redis.call('HSET', rec, 'state', 'inflight', 'owner', owner, 'fence', int(fence), 'fp', fp, 'ttl', ttl)
  if key and key ~= '' then redis.call('HSET', rec, 'key', key) end
  live_until(life)
  hold_for(lease)
  ledger(event, int(fence), '')
  return fence
end

-- the holder vanished (it stopped renewing): it may have forwarded the request, so the key is
-- indeterminate, not free; it is kept `ttl` past the end of the holder's call (`ttl` from now at
-- least), and its holder may still settle it
local function lapse(fence, ttl)
  redis.call('HSET', rec, 'state', 'indeterminate', 'lapsed', '1')
  keep_at_least(life_left() + ttl)
  index()
  ledger('lapsed', fence, '')
  return { 'indeterminate', fence, life_left() > 0 and 1 or 0 }
end

local state, holder, fence, lease_until = unpack(redis.call('HMGET', rec, 'state', 'owner', 'fence', 'lease_until'))

if op == 'claim' then
  local fp, lease, ttl, life = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[11])
  local key = argc > 12 and ARGV[12] or ''
  if not state then return { 'claimed', grant(fp, lease, ttl, life, 'claim', key), 0 } end
  if redis.call('HGET', rec, 'fp') ~= fp then return { 'mismatch' } end
  if state == 'completed' then
    -- replays cost the client no tokens of its limits, so they are bounded here, before the body is read
    local wait = pay_replay(tonumber(ARGV[9]), tonumber(ARGV[10]))
    if wait > 0 then return { 'replay_limited', wait } end
    local s, h, b, stored = unpack(redis.call('HMGET', rec, 'status', 'headers', 'body', 'stored'))
    ledger('replay', fence, s)
    return { 'completed', s, h, b or '', stored }
  end
  if state == 'indeterminate' then
    local busy = redis.call('HGET', rec, 'lapsed') == '1' and life_left() > 0
    return { 'indeterminate', fence, busy and 1 or 0 }
  end
  local left = tonumber(redis.call('HGET', rec, 'lease_until')) - now
  if left > 0 then return { 'inflight', left, fence } end
  -- a queued job whose delivery never started reached nobody: the next request takes over
  if string.sub(holder, 1, 4) == 'job:' and not redis.call('HGET', rec, 'sent') then
    return { 'claimed', grant(fp, lease, ttl, life, 'takeover', key), 1 }
  end
  return lapse(fence, tonumber(redis.call('HGET', rec, 'ttl')) or ttl)
end

if op == 'read' then
  if not state then return { 'absent', '', '', 0 } end
  local s, lease_until = unpack(redis.call('HMGET', rec, 'status', 'lease_until'))
  return { state, fence, s or '', math.max(0, (tonumber(lease_until) or now) - now) }
end

if op == 'resolve_release' or op == 'resolve_replay' then
  if not state then return { 'absent' } end
  unindex()
  if op == 'resolve_release' then
    redis.call('DEL', rec)
  else
    redis.call('HSET', rec, 'state', 'completed', 'status', ARGV[6], 'headers', ARGV[7], 'body', ARGV[8], 'stored', '1')
    redis.call('PEXPIRE', rec, tonumber(ARGV[9]))
  end
  ledger(op, fence, ARGV[6])
  return { 'ok' }
end

-- a retry of a completion that landed (its reply was lost): done already
if op == 'complete' and state == 'completed' and holder == owner then return { 'ok' } end
-- renew, start, park, complete, release, release_unsent, hold: only the holder of the claim, while
-- it is in flight; complete, release, release_unsent and hold also once its lease lapsed (nobody
-- else has the key, and the holder's news of the outcome is better than indeterminate), and renew
-- too, which then only keeps the record (the holder is alive after all, and may still settle it)
local settles = op == 'complete' or op == 'release' or op == 'release_unsent' or op == 'hold'
local lapsed = state == 'indeterminate' and redis.call('HGET', rec, 'lapsed') == '1'
if holder ~= owner or not (state == 'inflight' or ((settles or op == 'renew') and lapsed)) then
  if op == 'renew' or op == 'release_unsent' then return { 'not_owner' } end
  ledger('stale_' .. op, fence, settles and ARGV[6] or '')
  return { 'not_owner' }
end
if op == 'renew' and lapsed then
  keep_at_least(tonumber(ARGV[6]) + (tonumber(redis.call('HGET', rec, 'ttl')) or 0))
  return { 'ok' }
end
local sent = redis.call('HGET', rec, 'sent')
if (op == 'start' or op == 'release_unsent') and sent then return { 'sent' } end
-- a lapsed claim's holder settling it: it is no longer indeterminate (unless it holds it so)
if lapsed and op ~= 'renew' then unindex() end
if op == 'renew' or op == 'start' or op == 'park' then
  -- a renewal (or a park) never moves the lease earlier than granted already (a renewal on a clock
  -- behind the last one's); `start` deliberately shortens a job's lease to its delivery's
  if op == 'start' then live_until(tonumber(ARGV[7])) end
  if op == 'park' then live_until(tonumber(ARGV[6])) end
  hold_for(tonumber(ARGV[6]), op ~= 'start' and tonumber(lease_until) or nil)
  if op == 'start' then redis.call('HSET', rec, 'sent', '1') end
  if op == 'park' then redis.call('HDEL', rec, 'sent') end
elseif op == 'complete' then
  redis.call('HSET', rec, 'state', 'completed', 'status', ARGV[6], 'headers', ARGV[7], 'body', ARGV[8], 'stored', ARGV[9])
  redis.call('PEXPIRE', rec, tonumber(ARGV[10]))
  ledger('complete', fence, ARGV[6])
elseif op == 'release' or op == 'release_unsent' then
  redis.call('DEL', rec)
  ledger('release', fence, ARGV[6])
elseif op == 'hold' then
  redis.call('HSET', rec, 'state', 'indeterminate')
  -- kept `ttl` from the outcome, as a completed key is
  local keep = tonumber(redis.call('HGET', rec, 'ttl'))
  if keep then redis.call('PEXPIRE', rec, keep) end
  index()
  ledger('indeterminate', fence, ARGV[6])
end
return { 'ok' }
