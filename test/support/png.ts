import { inflateSync } from "node:zlib";

/** Decodes an 8-bit RGB or RGBA PNG (what Chromium's screenshots are) into RGBA pixels. */
export function decodePng(buf: Buffer): { width: number; height: number; rgba: Uint8Array } {
  if (buf.readUInt32BE(0) !== 0x89504e47) throw new Error("not a PNG");
  let at = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat: Buffer[] = [];
  while (at < buf.length) {
    const len = buf.readUInt32BE(at);
    const type = buf.toString("ascii", at + 4, at + 8);
    const data = buf.subarray(at + 8, at + 8 + len);
    if (type === "IHDR") {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      if (data[8] !== 8 || (data[9] !== 2 && data[9] !== 6) || data[12] !== 0) throw new Error("unsupported PNG");
      channels = data[9] === 6 ? 4 : 3;
    } else if (type === "IDAT") idat.push(data);
    at += 12 + len;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const out = new Uint8Array(width * height * 4);
  let prev = new Uint8Array(stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)] as number;
    const line = new Uint8Array(raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1)));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? (line[x - channels] as number) : 0;
      const b = prev[x] as number;
      const c = x >= channels ? (prev[x - channels] as number) : 0;
      const p = a + b - c;
      const pa = Math.abs(p - a),
        pb = Math.abs(p - b),
        pc = Math.abs(p - c);
      const add = [0, a, b, (a + b) >> 1, pa <= pb && pa <= pc ? a : pb <= pc ? b : c][filter] as number;
      line[x] = ((line[x] as number) + add) & 0xff;
    }
    for (let x = 0; x < width; x++) {
      out.set(
        [
          line[x * channels] as number,
          line[x * channels + 1] as number,
          line[x * channels + 2] as number,
          channels === 4 ? (line[x * channels + 3] as number) : 255,
        ],
        (y * width + x) * 4,
      );
    }
    prev = line;
  }
  return { width, height, rgba: out };
}

/** How many pixels are within `tolerance` of a colour. */
export function countColour(img: { rgba: Uint8Array }, [r, g, b]: [number, number, number], tolerance = 24): number {
  let n = 0;
  for (let i = 0; i < img.rgba.length; i += 4) {
    if (
      Math.abs((img.rgba[i] as number) - r) <= tolerance &&
      Math.abs((img.rgba[i + 1] as number) - g) <= tolerance &&
      Math.abs((img.rgba[i + 2] as number) - b) <= tolerance
    )
      n++;
  }
  return n;
}
