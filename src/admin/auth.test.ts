import { describe, expect, it } from "vitest";
import { issueSession, sessionOf, tokenMatches } from "./auth.js";

describe("admin authentication", () => {
  it("matches the bearer token exactly", async () => {
    expect(await tokenMatches("Bearer s3cret", "s3cret")).toBe(true);
    expect(await tokenMatches("bearer s3cret", "s3cret")).toBe(true);
    for (const bad of ["Bearer s3creT", "Bearer s3cret2", "s3cret", "Bearer ", "", null])
      expect(await tokenMatches(bad, "s3cret"), String(bad)).toBe(false);
  });

  it("signs dashboard sessions: valid until expiry, for this token only, and tamper-evident", async () => {
    const now = 1_800_000_000_000;
    const { value, maxAgeS, session } = await issueSession("s3cret", now);
    const valid = async (v: string | undefined, token: string, at: number) =>
      (await sessionOf(v, token, at)) !== undefined;
    expect(maxAgeS).toBe(43_200);
    expect(value).not.toContain("s3cret");
    expect(await sessionOf(value, "s3cret", now + 1_000)).toEqual(session);
    expect(session.id).toMatch(/^[0-9a-f]{32}$/);
    expect((await issueSession("s3cret", now)).session.id).not.toBe(session.id); // one id per sign-in
    expect(await valid(value, "s3cret", now + 43_200_001)).toBe(false); // expired
    expect(await valid(value, "other-token", now + 1_000)).toBe(false); // a new token ends sessions
    const [expiry, id, mac] = value.split(".") as [string, string, string];
    expect(await valid(`${Number(expiry) + 86_400_000}.${id}.${mac}`, "s3cret", now)).toBe(false); // stretched
    const flip = (x: string) => x.replace(/^./, (c) => (c === "0" ? "1" : "0"));
    expect(await valid(`${expiry}.${flip(id)}.${mac}`, "s3cret", now)).toBe(false); // another session's id
    expect(await valid(`${expiry}.${id}.${flip(mac)}`, "s3cret", now)).toBe(false);
    expect(await valid(`${expiry}.${mac}`, "s3cret", now)).toBe(false); // the id-less format
    expect(await valid(undefined, "s3cret", now)).toBe(false);
  });
});
