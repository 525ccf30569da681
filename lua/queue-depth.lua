#!lua flags=allow-key-locking
-- A queue route's backlog (src/features/shedding/queue/depth.ts), one call on each side.
-- KEYS[1]: {key_prefix}:queue:{sha256(route)}, hash: depth, head_at
-- ARGV[1]: enter | leave; ARGV[2]: enter: now (ms), leave: the job's enqueue time (ms);
-- ARGV[3]: the key's TTL (ms); ARGV[4] (enter): max_depth, 0 for none
-- enter: {0, depth} when the queue holds max_depth jobs already (nothing changes), else the job is
--   counted: {1, depth}. Checked and counted in one script, so isolates racing for the last place
--   never take more than max_depth between them. The first job of an empty queue is its oldest.
-- leave: the job is no longer waiting (never below 0). head_at moves up to its enqueue time: the
--   queue hands jobs out roughly first in, first out, so what still waits was queued after it.
local key = KEYS[1]
local at = tonumber(ARGV[2])
if ARGV[1] == 'enter' then
  local max = tonumber(ARGV[4])
  local depth = tonumber(redis.call('HGET', key, 'depth') or '0')
  if max > 0 and depth >= max then
    return { 0, depth }
  end
  if depth <= 0 then
    redis.call('HSET', key, 'head_at', at)
  end
  depth = redis.call('HINCRBY', key, 'depth', 1)
  redis.call('PEXPIRE', key, ARGV[3])
  return { 1, depth }
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
