#!lua flags=allow-key-locking
-- A queue route's backlog and each client's share of it (src/features/shedding/queue/depth.ts),
-- one call on each side. The clock is the caller's (ARGV[2]); the script reads no TIME.
-- KEYS[1]: {key_prefix}:queue:{sha256(route)}, hash: depth, head_at
-- KEYS[2] (optional): {key_prefix}:queue:{sha256(route)}:client:{sha256(client)}, sorted set: the
--   client's jobs still waiting, job id -> the time (ms) its entry lapses on its own (the latest
--   the job could still be delivered). Without it, no client's share is counted.
-- ARGV[1]: enter | leave; ARGV[2]: enter: now (ms), leave: the job's enqueue time (ms);
-- ARGV[3]: KEYS[1]'s TTL (ms)
-- ARGV[4..7] (enter): max_depth (0 for none); the job's id; max_per_client (0 for none); how long
--   the job's entry counts (ms), also KEYS[2]'s TTL
-- ARGV[4] (leave): the job's id
-- enter: {0, depth, mine} when the queue holds max_depth jobs already, {2, depth, mine} when the
--   client holds max_per_client of them (nothing changes either way), else the job is counted in
--   both: {1, depth, mine}. `mine` is the client's jobs after the call (0 without KEYS[2]).
--   Checked and counted in one script, so isolates racing for the last places never take more
--   than max_depth between them, nor one client more than its share. Entries past their time are
--   dropped first: a job whose `leave` never came (a consumer that died) stops counting against
--   its client when it could no longer be delivered, however busy the client stays. The first
--   job of an empty queue is its oldest.
-- leave: the job is no longer waiting: the route's depth falls (never below 0), the job's entry
--   goes (an empty set is deleted). head_at moves up to its enqueue time: the queue hands jobs
--   out roughly first in, first out, so what still waits was queued after it. Returns {1, depth}.
local key = KEYS[1]
local client = KEYS[2]
local at = tonumber(ARGV[2])
if ARGV[1] == 'enter' then
  local max = tonumber(ARGV[4])
  local id, share, life = ARGV[5], tonumber(ARGV[6] or '0'), tonumber(ARGV[7] or '0')
  local mine = 0
  if client then
    redis.call('ZREMRANGEBYSCORE', client, '-inf', at)
    mine = redis.call('ZCARD', client)
  end
  local depth = tonumber(redis.call('HGET', key, 'depth') or '0')
  if max > 0 and depth >= max then
    return { 0, depth, mine }
  end
  if client and share > 0 and mine >= share then
    return { 2, depth, mine }
  end
  if depth <= 0 then
    redis.call('HSET', key, 'head_at', at)
  end
  depth = redis.call('HINCRBY', key, 'depth', 1)
  redis.call('PEXPIRE', key, ARGV[3])
  if client then
    redis.call('ZADD', client, at + life, id)
    redis.call('PEXPIRE', client, life)
    mine = mine + 1
  end
  return { 1, depth, mine }
end
if client then
  redis.call('ZREM', client, ARGV[4])
  if redis.call('ZCARD', client) == 0 then
    redis.call('DEL', client)
  end
end
local depth = redis.call('HINCRBY', key, 'depth', -1)
if depth <= 0 then
  depth = 0
  redis.call('HSET', key, 'depth', 0)
  redis.call('HDEL', key, 'head_at')
elseif at > tonumber(redis.call('HGET', key, 'head_at') or '0') then
  redis.call('HSET', key, 'head_at', at)
end
redis.call('PEXPIRE', key, ARGV[3])
return { 1, depth }
