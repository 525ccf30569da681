#!lua flags=allow-key-locking
--[[
idempotency.lua: one side effect per idempotency key. Claims, completions, releases and
resolutions of a key, each one atomic call that checks who owns the claim; every outcome is
appended to the ledger. The clock is Redis's own (TIME, read once).

KEYS[1]  record   {key_prefix}:idem:{route}:{sha256(principal, key)}  hash:
                    state        inflight | completed | indeterminate
                    owner        the id of the request that holds the claim
                    fence        its fencing token
                    fp           the request fingerprint (method, path, query, principal, body hash)
                    lease_until  ms (Redis time) when an in-flight claim may be taken over
                    status, headers, body, stored   the origin's answer (completed)
                  TTL: `ttl` once completed; `ttl` too while in flight (the lease, shorter, is a field)
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
ARGV[1]  op: claim | renew | complete | release | hold | resolve_release | resolve_replay | read
ARGV[2]  owner (claim, renew, complete, release, hold)
ARGV[3]  route name, ARGV[4] key hash (for the ledger), ARGV[5] ledger max length
ARGV[6..] per op, then, always last, ARGV[#ARGV] the ledger context: JSON { trace, principal,
  session, latency_ms } (the request's traceparent, hashes, the origin's latency), written beside
  each ledger entry of this call; what does not decode as such an object adds nothing.
ARGV[6..#ARGV-1] per op:
  claim           fp, lease_ms, ttl_ms, replay_interval_us, replay_burst
  renew           lease_ms: the holder's claim cannot be taken over for that long from now
  complete        status, headers (JSON), body (base64), stored (1|0), ttl_ms
  release, hold   origin status ("" for a network error)
  resolve_replay  status, headers, body, ttl_ms
  resolve_release ""
Returns  claim:     { "claimed", fence, takeover (0|1) } | { "mismatch" } | { "inflight", lease_left_ms, fence }
                    | { "completed", status, headers, body, stored } | { "indeterminate", fence }
                    | { "replay_limited", retry_after_ms }  (completed, but the principal's replays are spent)
         renew, complete, release, hold: { "ok" } | { "not_owner" } (renewals are not in the ledger)
         resolve_*: { "ok" } | { "absent" }
         read:      { state or "absent", fence, status, lease_left_ms }
]]

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)

local op, owner, route, keyhash, maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local rec = KEYS[1]

local context = {}
do
  local ok, decoded = pcall(cjson.decode, ARGV[#ARGV])
  if ok and type(decoded) == 'table' then context = decoded end
end

local function ledger(event, fence, status)
  local fields = { 'event', event, 'route', route, 'key', keyhash, 'fence', tostring(fence or ''),
    'status', tostring(status or ''), 'at', tostring(now) }
  for _, name in ipairs({ 'trace', 'principal', 'session', 'latency_ms' }) do
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

local function grant(fp, lease, ttl, event)
  local fence = next_fence()
  redis.call('DEL', rec)
  redis.call('HSET', rec, 'state', 'inflight', 'owner', owner, 'fence', int(fence), 'fp', fp, 'lease_until', now + lease)
  redis.call('PEXPIRE', rec, ttl)
  ledger(event, int(fence), '')
  return fence
end

local state, holder, fence = unpack(redis.call('HMGET', rec, 'state', 'owner', 'fence'))

if op == 'claim' then
  local fp, lease, ttl = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
  if not state then return { 'claimed', grant(fp, lease, ttl, 'claim'), 0 } end
  if redis.call('HGET', rec, 'fp') ~= fp then return { 'mismatch' } end
  if state == 'completed' then
    -- replays cost the client no tokens of its limits, so they are bounded here, before the body is read
    local wait = pay_replay(tonumber(ARGV[9]), tonumber(ARGV[10]))
    if wait > 0 then return { 'replay_limited', wait } end
    local s, h, b, stored = unpack(redis.call('HMGET', rec, 'status', 'headers', 'body', 'stored'))
    ledger('replay', fence, s)
    return { 'completed', s, h, b or '', stored }
  end
  if state == 'indeterminate' then return { 'indeterminate', fence } end
  local left = tonumber(redis.call('HGET', rec, 'lease_until')) - now
  if left > 0 then return { 'inflight', left, fence } end
  -- the holder's lease ran out (it crashed, or the origin hung): the next request takes over
  return { 'claimed', grant(fp, lease, ttl, 'takeover'), 1 }
end

if op == 'read' then
  if not state then return { 'absent', '', '', 0 } end
  local s, lease_until = unpack(redis.call('HMGET', rec, 'status', 'lease_until'))
  return { state, fence, s or '', math.max(0, (tonumber(lease_until) or now) - now) }
end

if op == 'resolve_release' or op == 'resolve_replay' then
  if not state then return { 'absent' } end
  if op == 'resolve_release' then
    redis.call('DEL', rec)
  else
    redis.call('HSET', rec, 'state', 'completed', 'status', ARGV[6], 'headers', ARGV[7], 'body', ARGV[8], 'stored', '1')
    redis.call('PEXPIRE', rec, tonumber(ARGV[9]))
  end
  ledger(op, fence, ARGV[6])
  return { 'ok' }
end

-- renew, complete, release, hold: only the holder of the claim, and only while it is in flight
if state ~= 'inflight' or holder ~= owner then
  if op == 'renew' then return { 'not_owner' } end
  ledger('stale_' .. op, fence, ARGV[6])
  return { 'not_owner' }
end
if op == 'renew' then
  redis.call('HSET', rec, 'lease_until', now + tonumber(ARGV[6]))
elseif op == 'complete' then
  redis.call('HSET', rec, 'state', 'completed', 'status', ARGV[6], 'headers', ARGV[7], 'body', ARGV[8], 'stored', ARGV[9])
  redis.call('PEXPIRE', rec, tonumber(ARGV[10]))
  ledger('complete', fence, ARGV[6])
elseif op == 'release' then
  redis.call('DEL', rec)
  ledger('release', fence, ARGV[6])
elseif op == 'hold' then
  redis.call('HSET', rec, 'state', 'indeterminate')
  ledger('indeterminate', fence, ARGV[6])
end
return { 'ok' }
