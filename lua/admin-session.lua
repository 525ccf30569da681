#!lua flags=allow-key-locking
-- A dashboard session's server-side record (src/admin/sessions.ts).
-- KEYS[1]: {key_prefix}:admin-session:{sha256(session)}
-- ARGV[1]: start | touch | end; ARGV[2]: the record's TTL in ms (start, touch)
-- start: writes the record. touch: renews it only if it still exists (signed out or idle past
-- its TTL: it is gone, and stays gone), 1 if it did. end: deletes it (sign-out).
local op = ARGV[1]
if op == 'end' then
  return redis.call('DEL', KEYS[1])
end
if op == 'start' then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
  return 1
end
if redis.call('SET', KEYS[1], '1', 'XX', 'PX', ARGV[2]) then
  return 1
end
return 0
