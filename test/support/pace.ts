/*
 * Timing helpers for tests that must hold on a loaded machine: a load whose rate does not depend on
 * how fast the answers come back, and waits that poll for a state (with a generous cap) instead of
 * sleeping for a time the machine may or may not keep.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * `count` calls of `send`, one every `everyMs` (open loop: not waiting for answers, so a slow
 * answer does not slow the load down): the answers in order, and the seconds from the first send
 * to the last answer (at least the time the calls took to be decided, however slow the machine).
 *
 * @example const { results, seconds } = await paced((i) => call(mf, `/api/${i}`), 60, 25);
 */
export async function paced<T>(
  send: (i: number) => Promise<T>,
  count: number,
  everyMs: number,
): Promise<{ results: T[]; seconds: number }> {
  const sent: Array<Promise<T>> = [];
  const started = Date.now();
  for (let i = 0; i < count; i++) {
    sent.push(send(i));
    // against the schedule, so that a late timer does not stretch every later gap
    await sleep(Math.max(0, started + (i + 1) * everyMs - Date.now()));
  }
  const results = await Promise.all(sent);
  return { results, seconds: (Date.now() - started) / 1000 };
}

/**
 * Polls `read` (every `everyMs`, up to `capMs`) until `done` holds for its value: that value, or the
 * last one read when the cap ran out (the caller's expectation then fails with it).
 *
 * @example expect(await until(() => peek(route), (left) => left === 850)).toBe(850);
 */
export async function until<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  { everyMs = 25, capMs = 10_000 }: { everyMs?: number; capMs?: number } = {},
): Promise<T> {
  const since = Date.now();
  let value = await read();
  while (!done(value) && Date.now() - since < capMs) {
    await sleep(everyMs);
    value = await read();
  }
  return value;
}

/**
 * Waits until `count()` (a counter of requests, e.g. the bridge's script requests) has not moved
 * for `quietMs`, up to `capMs`: whatever was still to come of earlier work (a renewal, a give-back
 * sent when a lease expired) has come, or will never matter again. Returns whether it went quiet.
 */
export async function quiet(count: () => number, quietMs: number, capMs = 15_000): Promise<boolean> {
  const since = Date.now();
  let last = count();
  let still = Date.now();
  while (Date.now() - since < capMs) {
    await sleep(50);
    const now = count();
    if (now !== last) [last, still] = [now, Date.now()];
    else if (Date.now() - still >= quietMs) return true;
  }
  return false;
}
