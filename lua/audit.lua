#!lua flags=allow-key-locking
--[[
audit.lua: appends an operator's change to the audit trail and renews the trail's lifetime, in one
atomic call: the stream is never written without its TTL (an EXPIRE sent apart could fail after
the XADD landed, and leave the trail without one). Reads no clock: the entry's id is Redis's.

KEYS[1]  audit  {key_prefix}:audit  stream of the operators' changes (src/store/ledger.ts), capped at
                about ARGV[1] entries (MAXLEN ~); TTL ARGV[2] seconds from the last change
ARGV[1]  the trail's length (about), ARGV[2] its TTL in seconds, ARGV[3..] the entry: field, value, …
Returns  the new entry's id
]]

local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 3))
redis.call('EXPIRE', KEYS[1], ARGV[2])
return id
