import { describe, expect, it } from "vitest";
import { issueSession, sessionValid, tokenMatches } from "../../src/admin/auth.js";

describe("admin authentication", () => {
  it("matches the bearer token exactly", async () => {
    expect(await tokenMatches("Bearer s3cret", "s3cret")).toBe(true);
    expect(await tokenMatches("bearer s3cret", "s3cret")).toBe(true);
    for (const bad of ["Bearer s3creT", "Bearer s3cret2", "s3cret", "Bearer ", "", null])
      expect(await tokenMatches(bad, "s3cret"), String(bad)).toBe(false);
  });

  it("signs dashboard sessions: valid until expiry, for this token only, and tamper-evident", async () => {
    const now = 1_800_000_000_000;
    const { value, maxAgeS } = await issueSession("s3cret", now);
    expect(maxAgeS).toBe(43_200);
    expect(value).not.toContain("s3cret");
    expect(await sessionValid(value, "s3cret", now + 1_000)).toBe(true);
    expect(await sessionValid(value, "s3cret", now + 43_200_001)).toBe(false); // expired
    expect(await sessionValid(value, "other-token", now + 1_000)).toBe(false); // a new token ends sessions
    const [expiry, mac] = value.split(".") as [string, string];
    expect(await sessionValid(`${Number(expiry) + 86_400_000}.${mac}`, "s3cret", now)).toBe(false); // stretched
    expect(await sessionValid(`${expiry}.${mac.replace(/^./, (c) => (c === "0" ? "1" : "0"))}`, "s3cret", now)).toBe(
      false,
    );
    expect(await sessionValid(undefined, "s3cret", now)).toBe(false);
  });
});
