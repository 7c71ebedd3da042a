// A local HTTP server playing a sandbox runtime, for the client's logic tests (the real runtime is in
// tests/e2e/test_ts_client.py): the one place that spells the wire format those tests fake. Outside test/
// so `node --test dist/test/` does not run it as a test file.
import http from "node:http";
import type { AddressInfo } from "node:net";

/** What the in-pod probe (scripts/probe.sh) prints: the pod's name and, when given, its address lines. */
export function probeStdout(host: string, addresses = ""): string {
  const lines = addresses ? `${addresses}\n` : "";
  return `@LKCP\nbase=/home/user\nhost=${host}\nrunner=timeout\nbase64=1\ngroup=1\nlimit=300\n${lines}wrappers=\n`;
}

/** A wrapped command's answer: exit 0, output "hi". */
export const HI = "@LKC 0 1.00 1.01\naGk=\n";

export function isProbe(command: string): boolean {
  return command.includes("@LKCP");
}

/** Answer a command as the runtime does: its JSON with the given stdout. */
export function answer(res: http.ServerResponse, stdout: string): void {
  res.end(JSON.stringify({ stdout, stderr: "", exit_code: 0 }));
}

export type Handler = (command: string, res: http.ServerResponse, req: http.IncomingMessage) => void;

export interface FakeRuntime {
  base: string;
  close(): void;
}

/** Listen on 127.0.0.1 (a free port); `handler` gets each request's command ("" for an upload) once its body is in. */
export async function startRuntime(handler: Handler): Promise<FakeRuntime> {
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      let command = "";
      try {
        command = (JSON.parse(body || "{}") as { command?: string }).command ?? "";
      } catch {
        // an upload (multipart): no command
      }
      handler(command, res, req);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() };
}
