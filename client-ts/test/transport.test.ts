// The transport's rules against a local HTTP server that plays a runtime (logic only: the real runtime
// is in tests/e2e/test_ts_client.py): identity check, bounded answers, never re-sending a command.
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { MalformedResponse, ResponseTooLarge, ResponseTooSlow, TransportError, WrongPod } from "../src/errors.js";
import { RuntimeTransport } from "../src/transport.js";
import { answer, HI, isProbe, probeStdout, startRuntime } from "../testing/fake-runtime.js";

let base = "";
let executes = 0;
let mode: "ok" | "huge" | "trickle" | "garbage" | "gateway" | "gateway-probe" = "ok";
let probes = 0;
let close = () => {};

before(async () => {
  const runtime = await startRuntime((command, res) => {
    if (isProbe(command)) probes += 1;
    if (mode === "gateway-probe") return res.writeHead(502).end("no upstream");
    if (isProbe(command)) return answer(res, probeStdout("pod-a"));
    executes += 1;
    if (mode === "huge") return res.end("x".repeat(4096));
    if (mode === "garbage") return res.end("not json");
    if (mode === "gateway") return res.writeHead(502).end("upstream reset");
    if (mode === "trickle") {
      res.writeHead(200);
      const timer = setInterval(() => res.write(" "), 100);
      res.on("close", () => clearInterval(timer));
      return;
    }
    answer(res, HI);
  });
  base = runtime.base;
  close = runtime.close;
});
after(() => close());

const run = (t: RuntimeTransport) => t.execute("echo hi", { timeout: 5, maxOutput: 1000, cwd: "" });

test("a command runs after the probe; its output is decoded", async () => {
  mode = "ok";
  const t = new RuntimeTransport({ baseUrl: base, expectedHostname: "pod-a" });
  assert.deepEqual(await run(t), { output: "hi", exitCode: 0, truncated: false, timedOut: false });
  t.close();
});

test("another pod answering is WrongPod, before any command", async () => {
  mode = "ok";
  const before = executes;
  const t = new RuntimeTransport({ baseUrl: base, expectedHostname: "pod-b" });
  await assert.rejects(run(t), WrongPod);
  assert.equal(executes, before);
  t.close();
});

test("an answer over maxBytes is cut off (ResponseTooLarge)", async () => {
  mode = "huge";
  const t = new RuntimeTransport({ baseUrl: base }, { limits: { maxBytes: 1024, slackSeconds: 30 } });
  await assert.rejects(run(t), ResponseTooLarge);
  t.close();
});

test("a trickling answer is cut at the total deadline (ResponseTooSlow), and not sent again", async () => {
  mode = "trickle";
  const t = new RuntimeTransport({ baseUrl: base }, { limits: { maxBytes: 1 << 20, slackSeconds: 0 } });
  const before = executes;
  const started = Date.now();
  await assert.rejects(t.script("sleep", false, 1), ResponseTooSlow); // read timeout 1 s + slack 0
  assert.ok(Date.now() - started < 10_000);
  assert.equal(executes, before + 1);
  t.close();
});

test("garbage is MalformedResponse", async () => {
  mode = "garbage";
  const t = new RuntimeTransport({ baseUrl: base });
  await assert.rejects(run(t), MalformedResponse);
  t.close();
});

test("a refused connection is a TransportError that provably never reached the pod", async () => {
  const closed = http.createServer();
  await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
  const port = (closed.address() as AddressInfo).port;
  await new Promise<void>((r) => closed.close(() => r()));
  const t = new RuntimeTransport({ baseUrl: `http://127.0.0.1:${port}` });
  await assert.rejects(run(t), (err: unknown) => err instanceof TransportError && err.maybeDelivered === false);
  t.close();
});

test("a gateway's 502 to a command is a TransportError, and the command is not sent again", async () => {
  mode = "gateway";
  const t = new RuntimeTransport({ baseUrl: base });
  const before = executes;
  await assert.rejects(run(t), (err: unknown) => err instanceof TransportError && /gateway answered HTTP 502/.test(err.message));
  assert.equal(executes, before + 1);
  t.close();
});

test("a gateway's 502 to the probe is retried, then a TransportError (as the Python client)", async () => {
  mode = "gateway-probe";
  const t = new RuntimeTransport({ baseUrl: base });
  const before = probes;
  await assert.rejects(run(t), (err: unknown) => err instanceof TransportError && /gateway answered HTTP 502/.test(err.message));
  assert.equal(probes, before + 4);
  t.close();
});
