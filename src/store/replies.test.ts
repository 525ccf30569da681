import { describe, expect, it } from "vitest";
import { StoreError } from "./deadline.js";
import { asHash, scriptReply } from "./replies.js";

describe("scriptReply", () => {
  it("gives a script's list back as it came", () => {
    expect(scriptReply(["ok", 3], "idempotency.lua")).toEqual(["ok", 3]);
    expect(scriptReply([1, 2, 3, 4], "adaptive.lua", { length: 4 })).toEqual([1, 2, 3, 4]);
  });

  it("answers anything but the list the script gives as a store error that names the script", () => {
    const wrong: Array<[unknown, Parameters<typeof scriptReply>[2]]> = [
      ["<html>bad gateway</html>", {}],
      [null, {}],
      [{ result: 1 }, {}],
      [[1, 2, 3], { length: 4 }],
      [[1, "2"], { length: 2, each: (v) => typeof v === "number" }],
    ];
    for (const [reply, shape] of wrong) {
      let thrown: unknown;
      try {
        scriptReply(reply, "decide.lua", shape);
      } catch (e) {
        thrown = e;
      }
      expect(thrown).toBeInstanceOf(StoreError);
      expect((thrown as StoreError).message).toContain("unexpected reply from decide.lua");
    }
  });
});

describe("asHash", () => {
  it("reads HGETALL as a flat list or as the object a deserialising client gives", () => {
    expect(asHash(["a", "1", "b", "2"])).toEqual({ a: "1", b: "2" });
    expect(asHash({ a: "1" })).toEqual({ a: "1" });
    expect(asHash(null)).toEqual({});
  });
});
