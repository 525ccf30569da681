// Lua scripts are imported as text: wrangler's `Text` module rule in production, a tiny
// Vite plugin in vitest (see vitest.config.ts).
declare module "*.lua" {
  const source: string;
  export default source;
}
