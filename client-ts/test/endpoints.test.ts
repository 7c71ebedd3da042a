// Connection modes: the pod IP (IPv6 bracketed) and the sandbox router, whose X-Sandbox-* headers must ride on
// every request, the probe included (a local server stands in for the router: logic only).
import assert from "node:assert/strict";
import { test } from "node:test";
import { checkConnection, endpointFor } from "../src/endpoints.js";
import type { SessionView } from "../src/sessions.js";
import { RuntimeTransport } from "../src/transport.js";
import { answer, HI, isProbe, probeStdout, startRuntime } from "../testing/fake-runtime.js";

const view: SessionView = {
  name: "s1", namespace: "team-a", uid: "u", phase: "Ready", podName: "pod-a", podIPs: ["10.0.3.7"], sandboxName: "sbx-1",
  idleTimeout: null, conditions: [], suspendRequested: false, ready: true, finished: false,
};

test("the pod IP mode: the status's first pod IP on the runtime's port, IPv6 in brackets", () => {
  assert.deepEqual(endpointFor(view), { baseUrl: "http://10.0.3.7:8888", expectedHostname: "pod-a", expectedIPs: ["10.0.3.7"] });
  assert.equal(endpointFor({ ...view, podIPs: ["fd00::7"] }, { mode: "podIP", serverPort: 9000 }).baseUrl, "http://[fd00::7]:9000");
});

test("the router mode: the router's URL and the headers it routes by (the Python client's)", () => {
  const endpoint = endpointFor(view, { mode: "router", url: "http://router:8080", extraHeaders: { Authorization: "Bearer t" } });
  assert.deepEqual(endpoint, {
    baseUrl: "http://router:8080",
    expectedHostname: "pod-a",
    expectedIPs: ["10.0.3.7"],
    headers: { "X-Sandbox-ID": "sbx-1", "X-Sandbox-Namespace": "team-a", "X-Sandbox-Port": "8888", "X-Sandbox-Pod-IP": "10.0.3.7", Authorization: "Bearer t" },
  });
  assert.equal(endpointFor({ ...view, sandboxName: null }, { mode: "router", url: "http://r" }).headers!["X-Sandbox-ID"], "pod-a");
});

test("a bad connection is refused with what to fix", () => {
  assert.throws(() => checkConnection({ mode: "router", url: "router:8080/x y" }), /not a URL|http or https/);
  assert.throws(() => checkConnection({ mode: "tunnel" } as never), /'podIP' or 'router'/);
  checkConnection({ mode: "router", url: "https://router.example:443" });
});

test("through a router every request carries the routing headers, the probe and the command", async () => {
  const seen: Array<string | undefined> = [];
  const runtime = await startRuntime((command, res, req) => {
    seen.push(req.headers["x-sandbox-id"] as string | undefined);
    answer(res, isProbe(command) ? probeStdout("pod-a") : HI);
  });
  try {
    const t = new RuntimeTransport(endpointFor(view, { mode: "router", url: runtime.base }));
    const result = await t.execute("echo hi", { timeout: 5, maxOutput: 100, cwd: "" });
    assert.equal(result.output, "hi");
    assert.deepEqual(seen, ["sbx-1", "sbx-1"]);
    t.close();
  } finally {
    runtime.close();
  }
});
