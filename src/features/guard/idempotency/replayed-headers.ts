/** Headers of the origin's answer that are kept and replayed; cookies and hop-by-hop ones never are. */
export const REPLAYED_HEADERS = [
  "content-type",
  "content-language",
  "cache-control",
  "etag",
  "last-modified",
  "location",
  "link",
  "retry-after",
];

/** The headers of `res` that a stored answer keeps, as [name, value] pairs. */
export function replayedHeaders(res: Response): Array<[string, string]> {
  return REPLAYED_HEADERS.flatMap((h): Array<[string, string]> => {
    const v = res.headers.get(h);
    return v === null ? [] : [[h, v]];
  });
}
