import { createHash } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { hex, sha1Hex, sha256Hex } from "./digest.js";

/** Node's own digests: the reference (UTF-8 as Buffer.from reads a string, lone surrogates as U+FFFD). */
const node = (algorithm: string, data: string | Uint8Array) => createHash(algorithm).update(data).digest("hex");

describe("digests in hex", () => {
  it("hex is two lowercase digits a byte", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (b) => {
        expect(hex(b)).toBe(Buffer.from(b).toString("hex"));
      }),
    );
    expect(hex(new Uint8Array([0, 10, 171, 255]))).toBe("000aabff");
  });

  it("SHA-256 and SHA-1 of text (as UTF-8) and of bytes are Node's", async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ unit: "binary", maxLength: 40 }), fc.uint8Array({ maxLength: 64 }), async (s, b) => {
        expect(await sha256Hex(s)).toBe(node("sha256", s));
        expect(await sha256Hex(b)).toBe(node("sha256", b));
        expect(await sha1Hex(s)).toBe(node("sha1", s));
      }),
      { numRuns: 200 },
    );
    expect(await sha256Hex("")).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  });
});
