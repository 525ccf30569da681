#!lua flags=allow-key-locking
--[[
session.lua: one side-effecting call per agent session at a time, fenced. Acquire, renew and
release a session's lock, each one atomic call that checks who owns it; every grant, release and
takeover is appended to the ledger. A refusal is not: the caller counts it (a metric), so a
client's refusals, as many as its limits let it cause, never fill the ledger. The clock is Redis's
own (TIME, read once), unless the caller passes its own: a Redis that refuses TIME in scripts gets
the isolate's clock as the last ARGV, "clock:{µs}" (src/store/clock.ts; lua/decide.lua, Clock).
Whichever clock it is, the fencing token is max(last + 1, clock): strictly rising whatever the
clock does, and a renewal never moves a lease earlier than it was.

KEYS[1]  lock    {key_prefix}:session:{sha256([principal, session identity])}  hash: owner, fence,
                 lease_until (ms), sent (1 once a queued job's delivery started: op start; cleared
                 by park). TTL: the lease plus a minute, moved with every renewal (an abandoned
                 lock disappears on its own; until then the next request takes it over, and the
                 ledger says so). A live call renews its lock until its outcome is known; one whose
                 outcome stays unknown is not released but left to run out its lease.
KEYS[2]  fence   {key_prefix}:session:fence  the deployment's last session fencing token, one key
                 whatever the session and principal (invented session ids create no keys that last):
                 every grant gets max(last + 1, Redis time in µs), so tokens rise strictly across
                 every session, hence under each one, and still rise after the key expired.
                 TTL 30 days, renewed per grant.
KEYS[3]  ledger  {key_prefix}:ledger  stream, capped (MAXLEN ~)
ARGV[1]  op: acquire | renew | start | park | release | release_unsent
ARGV[2]  owner, ARGV[3] route, ARGV[4] lock hash (for the ledger), ARGV[5] ledger max length
ARGV[6]  acquire, renew, start, park: lease_ms (renew: the holder's lock cannot be taken over for
         that long from now). start: a renewal that marks a queued job's delivery as begun; park:
         one that clears the mark (the delivery failed without effect and waits for its retry).
         release_unsent: gives the lock back only if no delivery of its job may have begun (no
         mark): a copy of a job that never ran; a lock whose delivery began is left to its lease.
ARGV     last, optional: "clock:{µs}", the caller's clock, used instead of TIME
Returns  acquire: { "granted", fence, takeover (0|1) } | { "busy", lease_left_ms, fence }
         renew, start, park, release: { "ok" } | { "not_owner" } (renewals are not in the ledger)
         release_unsent: { "ok" } | { "sent" } (left held) | { "not_owner" } (not ledgered)
]]

-- the clock: the caller's when it passes one (the last ARGV), else Redis's TIME
local now_us = tonumber(string.match(ARGV[#ARGV] or '', '^clock:(%d+)$'))
if not now_us then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now = math.floor(now_us / 1000)

local op, owner, route, session, maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local holder, fence, lease_until = unpack(redis.call('HMGET', KEYS[1], 'owner', 'fence', 'lease_until'))

-- tokens have 16 digits (µs since 1970): written with %d, as tostring keeps only 14 (%.14g)
local function int(n)
  return string.format('%d', n)
end

local function ledger(event, f)
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*',
    'event', event, 'route', route, 'key', session, 'fence', f or '', 'status', '', 'at', tostring(now))
end

if op == 'acquire' then
  local lease = tonumber(ARGV[6])
  local takeover = 0
  if holder then
    local left = tonumber(lease_until) - now
    if left > 0 then
      return { 'busy', left, tonumber(fence) }
    end
    takeover = 1
  end
  local granted = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, now_us)
  redis.call('SET', KEYS[2], int(granted), 'PX', 2592000000)
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'owner', owner, 'fence', int(granted), 'lease_until', now + lease)
  redis.call('PEXPIRE', KEYS[1], lease + 60000)
  ledger(takeover == 1 and 'session_takeover' or 'session_grant', int(granted))
  return { 'granted', granted, takeover }
end

if op == 'renew' or op == 'start' or op == 'park' then
  if holder ~= owner then return { 'not_owner' } end
  -- never earlier than the lease already granted (a renewal on a clock behind the last one's)
  local held = math.max(tonumber(lease_until) or 0, now + tonumber(ARGV[6])) - now
  redis.call('HSET', KEYS[1], 'lease_until', now + held)
  if op == 'start' then redis.call('HSET', KEYS[1], 'sent', '1') end
  if op == 'park' then redis.call('HDEL', KEYS[1], 'sent') end
  redis.call('PEXPIRE', KEYS[1], held + 60000)
  return { 'ok' }
end

-- release, release_unsent: only the holder (a speculative release_unsent is not ledgered)
if holder ~= owner then
  if op == 'release_unsent' then return { 'not_owner' } end
  ledger('session_stale_release', fence)
  return { 'not_owner' }
end
if op == 'release_unsent' and redis.call('HGET', KEYS[1], 'sent') then return { 'sent' } end
redis.call('DEL', KEYS[1])
ledger('session_release', fence)
return { 'ok' }
