/**
 * Section 13, the SMS case at its real size: a burst of messages offered at once to a `queue`
 * route whose one limit is the provider's (a global rate across two regions, each with a database
 * of its own), delivered by the Queues consumer; against the same burst sent straight to the
 * provider (what it would have seen without sluice). The provider is the demo origin, which
 * records every arrival with its time and body.
 */
import { Miniflare } from "miniflare";
import { startRedis } from "@sluice/dev";
import { loadConfig } from "../../src/config/index.js";
import type { SluiceInput } from "../../src/config/schema.js";
import type { Place } from "../request.js";
import { type Cleanup, TOKEN } from "../stack.js";
import { outcomesOf, sleep } from "../edge.js";
import { writeAnchorDocs } from "../anchor/docs.js";
import {
  deliveries,
  messageBody,
  type ProviderFigures,
  renderSmsMarkdown,
  type SmsOptions,
  type SmsResult,
  worstWindow,
} from "./figures.js";
import { type Helpers, startHelpers } from "./helpers.js";
import { watchAdmissions } from "./admissions.js";

export const SMS_FULL: SmsOptions = {
  messages: 2_000,
  concurrency: 64,
  rate: 400,
  maxBatchSize: 100,
  // Miniflare hands the consumer one batch at a time and a partial one after this long: at 1 s the
  // last few hundred messages wait about 0.7 s more (Cloudflare runs a backlog's batches at once)
  maxBatchTimeoutS: 0.25,
  deadlineMs: 40_000,
};

export const SMS_QUICK: SmsOptions = { ...SMS_FULL, messages: 400, rate: 100 };

const PATH = "/sms";
/**
 * The limit's margin: the spread of the delay between a decision and the provider's arrival that it
 * absorbs (2 to 60 ms at the 99th percentile on this 2-core machine under the burst, up to 95 ms;
 * 50 ms let 402 into the provider's worst second in one run of five).
 */
const SMS_MARGIN = "100ms";
const KEY_PREFIX = "bench-sms";
const US: Place = { continent: "NA", colo: "IAD" };
const EU: Place = { continent: "EU", colo: "FRA" };

/** The gateway: one `queue` route, its one limit the provider's rate, exact in any one-second window. */
export function smsConfig(rate: number): SluiceInput {
  return {
    key_prefix: KEY_PREFIX,
    timeout_ms: 1_000,
    // a decision Redis did not make is a refusal (queued, delivered later), never a local guess above the limit
    on_store_error: "closed",
    home_region: "us",
    regions: { us: { continents: ["NA"] }, eu: { continents: ["EU"] } },
    routes: [
      {
        name: "sms",
        match: PATH,
        methods: ["POST"],
        on_limit: "queue",
        queue: { max_retries: 5 },
        limits: [
          // sliding_log: no window of one second ever holds more than `rate` (a token bucket admits burst + rate);
          // the margin absorbs the spread of the delay from decision to the provider's arrival
          {
            name: "provider",
            key: "global",
            rate,
            period: "1s",
            margin: SMS_MARGIN,
            scope: "global",
            algorithm: "sliding_log",
          },
        ],
      },
    ],
  };
}

/**
 * One sluice Worker (one colo) with a producer binding SLUICE_QUEUE and a consumer of it, as
 * wrangler.toml has them, listening on a loopback port; every request it takes in has `place`'s
 * `request.cf` (Miniflare's fixed `cf`), which picks its region. Returns its URL.
 */
async function queueWorker(
  bundle: string,
  cleanup: Cleanup,
  o: SmsOptions,
  bindings: Record<string, string>,
  place: Place,
): Promise<string> {
  const sluice = smsConfig(o.rate);
  const checked = loadConfig({ ORIGIN_URL: bindings.ORIGIN_URL, SLUICE: sluice });
  if (!checked.ok) throw new Error(`section 13's configuration rejected by sluice: ${checked.error.message}`);
  const mf = new Miniflare({
    modules: true,
    scriptPath: bundle,
    modulesRules: [{ type: "Text", include: ["**/*.lua"] }],
    compatibilityDate: "2026-04-01",
    bindings: { SLUICE: sluice, ...bindings },
    host: "127.0.0.1",
    port: 0,
    cf: { ...place },
    handleRuntimeStdio: (out: NodeJS.ReadableStream, err: NodeJS.ReadableStream) => (out.resume(), err.resume()),
    queueProducers: { SLUICE_QUEUE: { queueName: "sms-shed" }, SLUICE_DLQ: { queueName: "sms-shed-dlq" } },
    queueConsumers: {
      "sms-shed": {
        maxBatchSize: o.maxBatchSize,
        maxBatchTimeout: o.maxBatchTimeoutS,
        maxRetries: 10,
        deadLetterQueue: "sms-shed-dlq",
      },
      "sms-shed-dlq": { maxBatchSize: 10, maxBatchTimeout: 1 },
    },
  });
  let disposed: Promise<void> | undefined;
  cleanup.add(`miniflare (section 13, ${place.colo})`, () => (disposed ??= mf.dispose()));
  return (await mf.ready).origin;
}

/** Waits until provider `which` has every message (or the deadline passed), then what it saw. */
async function providerFigures(helpers: Helpers, which: number, o: SmsOptions, startedAt: number) {
  const offered = Array.from({ length: o.messages }, (_, i) => messageBody(i));
  let seen = await helpers.arrivals(which, PATH);
  while (new Set(seen.map((s) => s.body)).size < o.messages && Date.now() - startedAt < o.deadlineMs) {
    await sleep(100);
    seen = await helpers.arrivals(which, PATH);
  }
  await sleep(500); // a duplicate would arrive late: give it a moment
  seen = await helpers.arrivals(which, PATH);
  const d = deliveries(
    offered,
    seen.map((s) => s.body),
  );
  const figures: ProviderFigures = {
    offered: o.messages,
    delivered: d.delivered,
    duplicates: d.duplicates + d.unknown,
    missing: d.missing,
    worst_second: worstWindow(seen.map((s) => s.at)).count,
    total_ms: seen.length > 0 ? Math.max(...seen.map((s) => s.at)) - startedAt : 0,
  };
  return figures;
}

/** Two private redis-servers (us, the home region, and eu), registered with `cleanup`. */
async function twoRedis(cleanup: Cleanup): Promise<string[]> {
  const urls: string[] = [];
  for (const region of ["us", "eu"]) {
    const redis = await startRedis();
    cleanup.add(`redis-server sms ${region} (pid ${redis.pid})`, () => redis.stop());
    urls.push(redis.url);
  }
  return urls;
}

/** Section 13 on its own two Redis stacks, with `bundle` the Worker wrangler built. */
export async function measureSms(bundle: string, cleanup: Cleanup, o: SmsOptions): Promise<SmsResult> {
  const redisUrls = await twoRedis(cleanup);
  const helpers = await startHelpers(cleanup, redisUrls, TOKEN);
  const straight = await measureStraight(helpers, o);
  const bindings = workerBindings(helpers);
  // one Worker per region, as two colos: even messages enter in North America, odd ones in Europe
  const colos = [
    await queueWorker(bundle, cleanup, o, bindings, US),
    await queueWorker(bundle, cleanup, o, bindings, EU),
  ];
  const admissions = watchAdmissions(cleanup, redisUrls[0] as string, KEY_PREFIX);
  const offered = await helpers.offer(colos, PATH, o.messages, o.concurrency);
  const figures = await providerFigures(helpers, 1, o, offered.startedAt);
  const admitted = await admissions.stop();
  const direct = offered.answers.filter((a) => a.status === 200).length;
  const queued = offered.answers.filter((a) => a.status === 202).length;
  const sluice = {
    ...figures,
    direct,
    queued,
    offer_ms: offered.ms,
    admitted: admitted.length,
    worst_second_admitted: worstWindow(admitted).count,
  };
  return {
    options: o,
    limit: { rate: o.rate, period: "1s", algorithm: "sliding_log", scope: "global", margin: SMS_MARGIN },
    regions: { us: Math.ceil(o.messages / 2), eu: Math.floor(o.messages / 2) },
    answers: outcomesOf(offered.answers.map((a) => ({ ...a, ms: 0, region: "" }))),
    sluice,
    straight,
    problems: smsProblems(o, sluice, direct + queued),
  };
}

function workerBindings(helpers: Helpers): Record<string, string> {
  const [us, eu] = helpers.bridges as [string, string];
  return {
    ORIGIN_URL: helpers.providers[1] as string,
    UPSTASH_REDIS_REST_URL: us,
    UPSTASH_REDIS_REST_TOKEN: TOKEN,
    UPSTASH_REDIS_REST_URL_EU: eu,
    UPSTASH_REDIS_REST_TOKEN_EU: TOKEN,
  };
}

/** The same burst straight to a provider of its own: what it would have seen without sluice. */
async function measureStraight(helpers: Helpers, o: SmsOptions): Promise<ProviderFigures> {
  const offered = await helpers.offer([helpers.providers[0] as string], PATH, o.messages, o.concurrency);
  return providerFigures(helpers, 0, o, offered.startedAt);
}

function smsProblems(o: SmsOptions, s: SmsResult["sluice"], answered: number): string[] {
  const problems: string[] = [];
  if (answered !== o.messages) problems.push(`sms: ${o.messages - answered} offers answered neither 200 nor 202`);
  if (s.missing > 0) problems.push(`sms: ${s.missing} messages never reached the provider`);
  if (s.duplicates > 0) problems.push(`sms: ${s.duplicates} messages reached the provider twice or more`);
  if (s.worst_second_admitted > o.rate)
    problems.push(
      `sms: the limit admitted ${s.worst_second_admitted} in one second of Redis's clock (limit ${o.rate})`,
    );
  // +1: the provider's clock and Redis's differ by a hair
  if (s.worst_second > o.rate + 1)
    problems.push(
      `sms: the provider saw ${s.worst_second} in one second (limit ${o.rate}; the limit admitted at most ${s.worst_second_admitted} in any second of Redis's clock)`,
    );
  return problems;
}

/** The files whose `bench:sms` block the bench regenerates. */
export const SMS_DOCS = ["docs/benchmarks.md"];
export const SMS_MARKERS = { start: "<!-- bench:sms:start -->", end: "<!-- bench:sms:end -->" };

/** Rewrites the section's marked table in docs/benchmarks.md; returns the files changed. */
export function publishSms(r: SmsResult, meta: { started: Date; revision: string; command: string }): string[] {
  const markdown = renderSmsMarkdown(r, {
    date: meta.started.toISOString().slice(0, 10),
    revision: meta.revision,
    command: meta.command,
  });
  return writeAnchorDocs(markdown, SMS_DOCS, SMS_MARKERS);
}
