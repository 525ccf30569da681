import { createApp } from "../src/app.js";

// Wiring only: the environment reaches the app through Hono's bindings.
export default createApp();
