import type * as z from "zod/mini";
import en from "zod/v4/locales/en.js";

/**
 * The English messages of zod's checks ("Too small: expected number to be >0"), passed to each
 * parse rather than installed with `z.config()`: zod/mini loads no locale, and a library must not
 * change the configuration of the app's own zod.
 */
export const enLocale: { localeError: z.core.$ZodErrorMap } = en();
