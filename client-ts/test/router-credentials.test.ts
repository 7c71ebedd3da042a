// Router credentials in the TypeScript client (issue 51 item 2), as in the Python client: asked for together, kept
// until RENEW_MARGIN seconds before they expire, one per download path, and sent on every request.
import assert from "node:assert/strict";
import { test } from "node:test";
import { FIXED, RENEW_MARGIN, RouterCredentials, type Grant } from "../src/router-credentials.js";
import { RuntimeTransport } from "../src/transport.js";
import { answer, HI, isProbe, probeStdout, startRuntime } from "../testing/fake-runtime.js";

function counting(clock: () => number): { creds: RouterCredentials; calls: Array<Array<readonly [string, string]>> } {
  const calls: Array<Array<readonly [string, string]>> = [];
  const creds = new RouterCredentials({ url: "https://127.0.0.1:1", ca: "" }, async () => "t", "team-a", "s", 8888, clock, async (wanted) => {
    calls.push([...wanted]);
    const expires = Math.floor(clock()) + 300;
    return wanted.map(([m, p]): Grant => ({ sandbox: "sb", sandboxUID: "uid", expires, token: `${m} ${p} ${expires}` }));
  });
  return { creds, calls };
}

test("the fixed paths come in one call and are reused until near expiry", async () => {
  let now = 1_000_000;
  const { creds, calls } = counting(() => now);
  assert.match((await creds.grant("POST", "/execute")).token, /^POST \/execute/);
  assert.deepEqual([...calls[0]!].map((k) => k.join(" ")).sort(), FIXED.map((k) => k.join(" ")).sort());
  await creds.grant("GET", "/");
  await creds.grant("POST", "/upload");
  assert.equal(calls.length, 1);
  now += 300 - RENEW_MARGIN + 1;
  await creds.grant("POST", "/execute");
  assert.equal(calls.length, 2);
});

test("a download path gets its own token each time", async () => {
  const { creds, calls } = counting(() => 1_000_000);
  await creds.grant("GET", "/");
  await creds.grant("GET", "/download/.lkc-staging/a");
  await creds.grant("GET", "/download/.lkc-staging/a");
  assert.deepEqual(calls.slice(1), [[["GET", "/download/.lkc-staging/a"]], [["GET", "/download/.lkc-staging/a"]]]);
});

test("every request carries the token of its own method and path", async () => {
  const seen: string[] = [];
  const runtime = await startRuntime((command, res, req) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization}`);
    answer(res, isProbe(command) ? probeStdout("pod-a") : HI);
  });
  try {
    const { creds } = counting(() => 1_000_000);
    const t = new RuntimeTransport({ baseUrl: runtime.base, expectedHostname: "pod-a", credentials: creds });
    const result = await t.execute("echo hi", { timeout: 5, maxOutput: 100, cwd: "" });
    assert.equal(result.output, "hi");
    assert.equal(seen.length, 2);
    for (const line of seen) assert.match(line, /^POST \/execute Bearer POST \/execute \d+$/);
    t.close();
  } finally {
    runtime.close();
  }
});
