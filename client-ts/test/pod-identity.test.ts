// Issue 28 item 12 in the TypeScript client (issue 30): the pod reached must be the session's pod by its name AND
// by one of the IPs the API gave it (status.podIPs), as langchain_k8s_client.runtime checks.
//
// Attack: a pod name is unique only within a namespace. A pod of another namespace named like the session's pod
// (reached through the router, which picks its target from headers, or at an IP the session's pod had before it
// was replaced) answered the probe as the session's pod, and got the session's commands and files: the client
// checked the name alone. The probe reports the pod's own addresses (scripts/probe.sh: the kernel's local
// routes, if_inet6); the client refuses with WrongPod when none holds a status IP, judged in the address
// families the pod shows (gVisor's kernel shows no IPv4 list: there the name alone decides, as in Python).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { after, before, test } from "node:test";
import { endpointFor } from "../src/endpoints.js";
import { WrongPod } from "../src/errors.js";
import * as probe from "../src/probe.js";
import type { SessionView } from "../src/sessions.js";
import { RuntimeTransport } from "../src/transport.js";
import { answer, type FakeRuntime, HI, isProbe, probeStdout, startRuntime } from "../testing/fake-runtime.js";

const SESSION_POD = "s-7f3k2";
const SESSION_IP = "10.244.1.17";

let runtime: FakeRuntime;
let answering = { host: SESSION_POD, addresses: "" };
let commands = 0;

before(async () => {
  runtime = await startRuntime((command, res) => {
    if (isProbe(command)) return answer(res, probeStdout(answering.host, answering.addresses));
    commands += 1;
    answer(res, HI);
  });
});
after(() => runtime.close());

function view(podIPs: string[]): SessionView {
  return {
    name: "s", namespace: "team-a", uid: "u", phase: "Ready", podName: SESSION_POD, podIPs, sandboxName: "s",
    idleTimeout: null, conditions: [], suspendRequested: false, ready: true, finished: false,
  };
}

/** The endpoint the client derives from the session's status, sent to the local stand-in pod. */
function transportFor(podIPs: string[], mode: "podIP" | "router" = "podIP"): RuntimeTransport {
  const endpoint = endpointFor(view(podIPs), mode === "router" ? { mode, url: "http://router.invalid:8080" } : undefined);
  return new RuntimeTransport({ ...endpoint, baseUrl: runtime.base });
}

const run = (t: RuntimeTransport) => t.execute("cat ~/.secrets", { timeout: 5, maxOutput: 100, cwd: "" });

for (const mode of ["podIP", "router"] as const) {
  test(`a namesake pod at another address is refused before any command (${mode} mode)`, async () => {
    answering = { host: SESSION_POD, addresses: "v4= 10.244.2.9/32 127.0.0.0/8 127.0.0.1/32\nv6=" };
    const before = commands;
    const t = transportFor([SESSION_IP], mode);
    try {
      await assert.rejects(run(t), (err: unknown) => {
        assert.ok(err instanceof WrongPod, String(err));
        for (const part of [SESSION_POD, SESSION_IP, "10.244.2.9"]) assert.ok(err.message.includes(part), err.message);
        return true;
      });
      assert.equal(commands, before, "the command reached the impostor");
    } finally {
      t.close();
    }
  });
}

for (const [label, addresses, ips] of [
  ["v4", `v4= ${SESSION_IP}/32 127.0.0.0/8 127.0.0.1/32\nv6=`, [SESSION_IP]],
  ["v6", "v4= 127.0.0.0/8 127.0.0.1/32\nv6= fd000000000000000000000000000017 00000000000000000000000000000001", [SESSION_IP, "fd00::17"]],
  ["a shared loopback range (the kwok node's pods)", "v4= 127.0.0.0/8 127.0.0.1/32\nv6=", ["127.5.0.7"]],
  ["no IPv4 shown (gVisor): judged by the name", "v4=\nv6= 00000000000000000000000000000001", [SESSION_IP]],
] as const) {
  test(`the session's pod is accepted: ${label}`, async () => {
    answering = { host: SESSION_POD, addresses };
    const t = transportFor([...ips]);
    try {
      assert.equal((await run(t)).output, "hi");
    } finally {
      t.close();
    }
  });
}

test("with no IPv4 shown (gVisor) another pod's name is still refused", async () => {
  answering = { host: "another-pod", addresses: "v4=\nv6= 00000000000000000000000000000001" };
  const before = commands;
  const t = transportFor([SESSION_IP]);
  try {
    await assert.rejects(run(t), WrongPod);
    assert.equal(commands, before);
  } finally {
    t.close();
  }
});

test("the probe reports the addresses of the network it runs in (run here, as in a pod)", () => {
  const stdout = execFileSync("sh", ["-c", probe.buildProbe()], { cwd: "/tmp", encoding: "utf-8" });
  const info = probe.parseProbe(stdout);
  assert.ok(probe.holds(info, "127.0.0.1"), info.addresses.join(" "));
  assert.ok(!probe.holds(info, "203.0.113.7"), info.addresses.join(" "));
});
