#!lua flags=allow-key-locking,no-writes
--[[
clock.lua: which clock this database's scripts run on (src/store/clock.ts). GET /__sluice/health
and `npm run check -- --store` run it when this isolate has not learnt that from a decision yet:
a Redis that refuses TIME in scripts refuses it here as in every other script, and the store then
passes the isolate's clock, as it does to the others. The clock is Redis's own (TIME, read once),
unless the caller passes its own (lua/decide.lua, Clock). It reads and writes no key.

KEYS[1]  {key_prefix}:version, named only so that the call has a key (a cluster routes a script
         by its keys, and ElastiCache Serverless refuses scripts without one); never touched
ARGV     last, optional: "clock:{µs}", the caller's clock, used instead of TIME
Returns  { the clock in µs (text), "redis" or "passed" }
Cost     EVALSHA + TIME = 2 (1 with a passed clock)
]]

-- the clock: the caller's when it passes one (the last ARGV), else Redis's TIME
local now = tonumber(string.match(ARGV[#ARGV] or '', '^clock:(%d+)$'))
local passed = now ~= nil
if not passed then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
return { string.format('%d', now), passed and 'passed' or 'redis' }
