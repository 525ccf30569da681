/** Where the library entry takes the step type from: it lives beside the scope it is handed (src/context.ts). */
export type { Step } from "../context.js";
