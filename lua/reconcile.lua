#!lua flags=allow-key-locking
--[[
reconcile.lua: what the origin says of an indeterminate idempotency key (its reconcile endpoint,
docs/idempotency-and-sessions.md, Reconciliation), applied to the key's record only if nothing
moved meanwhile: the record still holds the claim whose fencing token the origin was sent, still
indeterminate (or, for a queued job's delivery, still that job's). A manual resolution, a later
claim or another reconciliation in between makes the answer stale: it is ignored. The clock is
Redis's own (TIME, read once), unless the caller passes its own as the last ARGV, "clock:{µs}"
(src/store/clock.ts).

The record is lua/idempotency.lua's (its contract names the fields); this script reads state,
owner, fence, lapsed, life_until and key, and writes the answer, reconcile_tries and
reconcile_next.

ops found, absent, failed:
KEYS[1]  record   {key_prefix}:idem:{route}:{sha256(principal, key)}
KEYS[2]  index    {key_prefix}:idem:{route}:indeterminate  (sorted set of key hashes)
KEYS[3]  ledger   {key_prefix}:ledger  stream, capped (MAXLEN ~)
ARGV[1]  op, ARGV[2] route, ARGV[3] key hash, ARGV[4] ledger max length
ARGV[5]  the fencing token the origin was sent (the claim asked about)
ARGV[6]  a queued job's owner whose delivery's outcome is unknown ("" for an indeterminate key)
  found   ARGV[7] status, ARGV[8] headers (JSON), ARGV[9] body (base64), ARGV[10] stored (1|0),
          ARGV[11] ttl_ms: the call happened, this was its answer: completed, replayed from now on
  absent  the call never happened: an indeterminate key is released (deleted); a job's claim loses
          its `sent` mark (the job may be delivered again, as after a 5xx)
  failed  ARGV[7] the origin's status ("" for none), ARGV[8] backoff base ms: still unknown; the
          next reconciliation waits min(base × 2^(tries - 1), 1 h)
then the ledger context (JSON { trace }), and optionally the clock.
Returns { "ok" } | { "stale", state or "absent", fence }

op peek (the cron's look at the oldest indeterminate keys):
KEYS[1]  index, KEYS[2..] the records of ARGV[2..] (key hashes, as the index holds them)
Members whose record is gone or no longer indeterminate leave the index.
Returns { now_ms, { hash, since_ms, fence, key, next_ms, busy (1: a lapsed claim whose call may
still run) } ... } for the members still indeterminate.

op oldest: KEYS[1] index, ARGV[2] how many. Returns { hash, since_ms, ... } oldest first.

op waiting (the dashboard): KEYS the indexes of several routes. Returns { now_ms, { count,
oldest_since_ms or "" } per index } (members not yet pruned by a cron run included).
]]

local now_us = tonumber(string.match(ARGV[#ARGV] or '', '^clock:(%d+)$'))
local argc = now_us and #ARGV - 1 or #ARGV
if not now_us then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now = math.floor(now_us / 1000)
local op = ARGV[1]

if op == 'oldest' then
  return redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1, 'WITHSCORES')
end

if op == 'waiting' then
  local out = {}
  for i, index in ipairs(KEYS) do
    local first = redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')
    out[i] = { redis.call('ZCARD', index), first[2] or '' }
  end
  return { now, out }
end

-- a lapsed claim's holder may still be calling the origin until life_until: never asked about then
local function busy(rec)
  local lapsed, life_until = unpack(redis.call('HMGET', rec, 'lapsed', 'life_until'))
  return lapsed == '1' and now < (tonumber(life_until) or 0)
end

if op == 'peek' then
  local out = {}
  for i = 2, #KEYS do
    local hash, rec = ARGV[i], KEYS[i]
    local state, fence, key, next_at = unpack(redis.call('HMGET', rec, 'state', 'fence', 'key', 'reconcile_next'))
    if state ~= 'indeterminate' then
      redis.call('ZREM', KEYS[1], hash)
    else
      local since = redis.call('ZSCORE', KEYS[1], hash) or ''
      out[#out + 1] = { hash, since, fence or '', key or '', next_at or '0', busy(rec) and 1 or 0 }
    end
  end
  return { now, out }
end

local rec, index = KEYS[1], KEYS[2]
local route, keyhash, maxlen, sent_fence, job = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]

local context = {}
do
  local ok, decoded = pcall(cjson.decode, ARGV[argc])
  if ok and type(decoded) == 'table' then context = decoded end
end

local function ledger(event, fence, status)
  local fields = { 'event', event, 'route', route, 'key', keyhash, 'fence', fence, 'status', status, 'at', tostring(now) }
  if type(context.trace) == 'string' and context.trace ~= '' then
    fields[#fields + 1] = 'trace'
    fields[#fields + 1] = context.trace
  end
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*', unpack(fields))
end

local state, holder, fence = unpack(redis.call('HMGET', rec, 'state', 'owner', 'fence'))
-- the answer is about the claim asked about: an indeterminate key not in its call's life, or the
-- job's own delivery; a later claim, a resolution or an answer stored meanwhile wins
local indeterminate = state == 'indeterminate' and not busy(rec)
local jobs = job ~= '' and state == 'inflight' and holder == job
if fence ~= sent_fence or not (indeterminate or jobs) then return { 'stale', state or 'absent', fence or '' } end

if op == 'found' then
  redis.call('HSET', rec, 'state', 'completed', 'status', ARGV[7], 'headers', ARGV[8], 'body', ARGV[9], 'stored', ARGV[10])
  redis.call('HDEL', rec, 'key', 'reconcile_tries', 'reconcile_next')
  redis.call('PEXPIRE', rec, tonumber(ARGV[11]))
  redis.call('ZREM', index, keyhash)
  ledger('reconciled', fence, ARGV[7])
elseif op == 'absent' then
  if jobs then
    redis.call('HDEL', rec, 'sent')
  else
    redis.call('DEL', rec)
    redis.call('ZREM', index, keyhash)
  end
  ledger('reconciled', fence, '404')
elseif op == 'failed' then
  local tries = redis.call('HINCRBY', rec, 'reconcile_tries', 1)
  local wait = math.min(tonumber(ARGV[8]) * 2 ^ math.min(tries - 1, 30), 3600000)
  redis.call('HSET', rec, 'reconcile_next', string.format('%d', now + wait))
  ledger('reconcile_failed', fence, ARGV[7])
end
return { 'ok' }
