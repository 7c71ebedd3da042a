// The Node side of benchmarks/bench_ts_client.py: attaches to a session, then answers lines on stdin,
// `<ts|raw> <count>`, with the milliseconds of each call (timed here, so the pipe costs nothing):
// `ts` is AgentSessionSandbox.execute("true"), `raw` a keep-alive POST of `sh -c true` to the same runtime.
import http from "node:http";
import { createInterface } from "node:readline";
import { AgentSessionSandbox } from "../src/index.js";

const [namespace, name] = process.argv.slice(2) as [string, string];
const sb = await AgentSessionSandbox.create(name, { namespace });
const view = await sb.waitReady();
// The exact command execute("true") sends (the staged wrapper), to split the cost: pod-side wrapper
// (`wrapped`: Node's own POST of it) against client-side work (`ts` minus `wrapped`).
let sent = "";
const script = sb.transport.script.bind(sb.transport);
sb.transport.script = (command, idempotent, readTimeout) => {
  sent = command;
  return script(command, idempotent, readTimeout);
};
await sb.execute("true");
await sb.execute("true");
const wrappedBody = JSON.stringify({ command: sent });
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const body = JSON.stringify({ command: "sh -c true" });

function rawPost(payload = body): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: view.podIPs[0], port: 8888, path: "/execute", method: "POST", agent, headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(payload) } },
      (res) => {
        res.resume();
        res.on("end", () => (res.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`))));
      },
    );
    req.on("error", reject);
    req.end(payload);
  });
}
await rawPost();

const calls: Record<string, () => Promise<unknown>> = {
  ts: () => sb.execute("true"),
  raw: () => rawPost(),
  wrapped: () => rawPost(wrappedBody),
  script: () => sb.transport.script(sent, false),
};
process.stdout.write("ready\n");
for await (const line of createInterface({ input: process.stdin })) {
  const [what, count] = line.trim().split(" ");
  const fn = calls[what!];
  if (!fn) break;
  const times: number[] = [];
  for (let i = 0; i < Number(count); i++) {
    const started = performance.now();
    await fn();
    times.push(performance.now() - started);
  }
  process.stdout.write(JSON.stringify(times) + "\n");
}
sb.close();
agent.destroy();
