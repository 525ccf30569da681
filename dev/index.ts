/**
 * `@sluice/dev`: what the tests and the bench take from the local stack. They import this entry
 * (package.json's `exports`), never a file under dev/ by its path, so the files behind it can
 * change without reaching into test/ or bench/; `npm run dev` and `npm run check` are this
 * workspace's own programs (start.ts, check.ts) and are not exported.
 */
export {
  refuseTime,
  startBridge,
  stripUnknownFlags,
  type Bridge,
  type BridgeCounts,
  type BridgeFault,
  type BridgeMode,
  type BridgeOptions,
  type ScriptTime,
  type DropRule,
} from "./bridge.js";
export { startOrigin, type DemoOrigin, type SeenRequest } from "./origin.js";
export { freePort } from "./ports.js";
export {
  serviceOf,
  startQueueingOrigin,
  type QueueingModel,
  type QueueingOrigin,
  type QueueingStats,
} from "./queueing-origin.js";
export { REDIS_MISSING, redisServerAvailable, startRedis, type RedisProcess } from "./redis-process.js";
export {
  encodeCommand,
  replyToJs,
  RespClient,
  RespError,
  type RespArg,
  type RespClientOptions,
  type RespReply,
} from "./resp.js";
export { simulateSplit, type SplitResult, type SplitScenario } from "./split-simulation.js";
