/** Work that may finish after the response (`ctx.waitUntil`). */
export type Defer = (work: Promise<unknown>) => void;
