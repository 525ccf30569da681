#!lua flags=allow-key-locking
--[[
access-lists.lua: the deny and allow lists' hash (with the routes' degrade switches, which live in it).
Every read and every write first drops the fields that have run out, in the same atomic call, so
no reader is ever handed a dead entry and the hash holds only what is in force. Automatic bans
are bounded: a ban written past `cap` live bans drops the ban that expires soonest (never an
operator's entry, never a switch).

The clock is the caller's (ARGV[2]): every `until` in the hash was written in a writing isolate's
clock and is checked by every isolate against its own, so the script judges them the same way.
It reads no TIME.

KEYS[1]  lists    {key_prefix}:lists  hash: field `{kind}:{entry}` (deny, allow) or `mode:{route}`
                  → JSON with `until` (ms since epoch); an automatic ban has `"source":"ban"`.
                  TTL: `hash_ttl_s` from its last write (a read that prunes it empty deletes it)
KEYS[2]  version  {key_prefix}:version  the change counter: INCR after every write, kept at least
                  `version_ttl_ms`; a read never bumps it (what it prunes was out of force already)
ARGV[1]  op: read | write | remove
ARGV[2]  now: ms since epoch (the caller's clock)
ARGV[3]  write, remove: the field
ARGV[4]  write: the value (JSON)
ARGV[5]  write: the cap on live automatic bans (0: no cap)
ARGV[6]  write, remove: version_ttl_ms
ARGV[7]  write: hash_ttl_s
Returns  read:   { version, value, value, ... }  the counter (read in this call), then every live value
         write:  { dropped, field, field, ... }  how many bans the cap dropped, and their fields
         remove: { removed }  1 when the field was there (and in force), else 0
Values that do not decode as an object with a numeric `until` are left alone (readers pass them over).
]]

local op, now = ARGV[1], tonumber(ARGV[2])

-- each field with its value and what the script knows of it: its expiry and whether a ban wrote it
local function scan()
  local flat = redis.call('HGETALL', KEYS[1])
  local fields = {}
  for i = 1, #flat, 2 do
    local f = { name = flat[i], value = flat[i + 1] }
    local ok, decoded = pcall(cjson.decode, f.value)
    if ok and type(decoded) == 'table' and type(decoded['until']) == 'number' then
      f['until'] = decoded['until']
      f.ban = decoded.source == 'ban'
    end
    fields[#fields + 1] = f
  end
  return fields
end

-- drops the fields that ran out; gives back the live ones
local function prune(fields)
  local live, dead = {}, {}
  for _, f in ipairs(fields) do
    if f['until'] ~= nil and f['until'] <= now then dead[#dead + 1] = f.name else live[#live + 1] = f end
  end
  for i = 1, #dead, 500 do
    redis.call('HDEL', KEYS[1], unpack(dead, i, math.min(i + 499, #dead)))
  end
  return live
end

local function bump(version_ttl)
  redis.call('INCR', KEYS[2])
  if redis.call('PTTL', KEYS[2]) < version_ttl then redis.call('PEXPIRE', KEYS[2], version_ttl) end
end

-- room for one more ban: the live bans but `field` (which the write replaces), soonest expiry first
local function make_room(live, field, cap)
  local bans = {}
  for _, f in ipairs(live) do
    if f.ban and f.name ~= field then bans[#bans + 1] = f end
  end
  local dropped = { 0 }
  if cap <= 0 or #bans < cap then return dropped end
  table.sort(bans, function(a, b) return a['until'] < b['until'] end)
  for i = 1, #bans - cap + 1 do
    redis.call('HDEL', KEYS[1], bans[i].name)
    dropped[#dropped + 1] = bans[i].name
  end
  dropped[1] = #dropped - 1
  return dropped
end

local live = prune(scan())

if op == 'read' then
  local out = { redis.call('GET', KEYS[2]) or '0' }
  for _, f in ipairs(live) do out[#out + 1] = f.value end
  return out
end

local field = ARGV[3]
if op == 'remove' then
  local removed = redis.call('HDEL', KEYS[1], field)
  bump(tonumber(ARGV[6]))
  return { removed }
end

-- write: an automatic ban makes room first; an operator's entry or a switch is never refused
local value = ARGV[4]
local ok, decoded = pcall(cjson.decode, value)
local dropped = { 0 }
if ok and type(decoded) == 'table' and decoded.source == 'ban' then
  dropped = make_room(live, field, tonumber(ARGV[5]))
end
redis.call('HSET', KEYS[1], field, value)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[7]))
bump(tonumber(ARGV[6]))
return dropped
