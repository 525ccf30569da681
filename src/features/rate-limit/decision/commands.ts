// In a module of its own, without the script's text: the bench imports it under plain Node.
/**
 * What a decision sends (EVALSHA/EVAL, `_ro` for peeks) and what decide.lua may run inside it
 * (Upstash bills each): the commands the billed-command counts of the tests and the bench add up.
 */
export const DECIDE_COMMANDS = [
  "evalsha",
  "eval",
  "evalsha_ro",
  "eval_ro",
  "time",
  "mget",
  "get",
  "set",
  "del",
  "hmget",
  "incrby",
  "pexpire",
  // sliding_log's sorted set
  "zcount",
  "zrangebyscore",
  "zrange",
  "zremrangebyscore",
  "zadd",
  "zrem",
] as const;
