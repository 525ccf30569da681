import { createServer } from "node:net";

/** A TCP port that was free on 127.0.0.1 a moment ago (the OS picks it; there is an inherent race). */
export async function freePort(): Promise<number> {
  return await new Promise<number>((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      if (address === null || typeof address === "string") {
        server.close();
        reject(new Error("could not read the port of a listening socket"));
        return;
      }
      server.close(() => resolve(address.port));
    });
  });
}
