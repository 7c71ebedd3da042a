// Issue 51 item 1 in the TypeScript client: a pod must prove with its identity token that it is the session's
// pod before the client sends it anything (langchain_k8s_client.pod_identity; the same cases as
// tests/unit/client/test_client_pod_identity.py).
//
// Attack: a namesake pod in another namespace at the IP a stale status names is honest about its name and its
// addresses, and those match: it received the session's commands and files. Its identity token (a projected
// ServiceAccount token the kubelet mints for that pod alone, signed by the cluster) names its own namespace, or
// it has none: the client refuses it with UnverifiedPod (a WrongPod) before any command, upload or download.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import * as k8s from "@kubernetes/client-node";
import { AgentSessionSandbox, SessionManager, UnverifiedPod, WrongPod } from "../src/index.js";
import { resolveEndpoint } from "../src/endpoints.js";
import { POD_IDENTITY_TOKEN_PATH } from "../src/generated/contract.js";
import { checkPodIdentity, ClusterKeys, KEYS_MAX_AGE, REFETCH_INTERVAL, verifyToken } from "../src/identity.js";
import * as probe from "../src/probe.js";
import * as scriptText from "../src/script-text.js";
import type { SessionView } from "../src/sessions.js";
import { RuntimeTransport } from "../src/transport.js";
import { ClusterSigner, startApiServer, type ApiServer } from "../testing/cluster-signer.js";
import { answer, HI, isProbe, probeStdout, startRuntime, type FakeRuntime } from "../testing/fake-runtime.js";

const SESSION_POD = "s-7f3k2";
const SESSION_IP = "10.244.1.17";
const AT_SESSION_IP = `v4= ${SESSION_IP}/32 127.0.0.0/8 127.0.0.1/32\nv6=`;

let runtime: FakeRuntime;
let showing = "";
/** Every request but the probe that reached the stand-in pod: what a refused pod must never see. */
let sent: string[] = [];
const servers: ApiServer[] = [];

before(async () => {
  runtime = await startRuntime((command, res, req) => {
    if (isProbe(command)) return answer(res, probeStdout(SESSION_POD, showing));
    sent.push(`${req.method} ${req.url}`);
    answer(res, HI);
  });
});
after(() => {
  runtime.close();
  for (const server of servers) server.close();
});

function view(podIPs = [SESSION_IP]): SessionView {
  return {
    name: "s", namespace: "team-a", uid: "u", phase: "Ready", podName: SESSION_POD, podIPs, sandboxName: "s",
    idleTimeout: null, conditions: [], suspendRequested: false, ready: true, finished: false,
  };
}

async function serve(signer: ClusterSigner): Promise<k8s.KubeConfig> {
  const server = await signer.serve();
  servers.push(server);
  return server.kubeConfig;
}

/** The client's own path: the endpoint resolved from the status (the cluster's keys through `kubeConfig`),
 * pointed at the stand-in pod, which shows `shows` (its address lines, its identity token line). */
async function reached(shows: string, kubeConfig: k8s.KubeConfig): Promise<RuntimeTransport> {
  showing = shows;
  sent = [];
  const endpoint = await resolveEndpoint(view(), { kubeConfig });
  return new RuntimeTransport({ ...endpoint, baseUrl: runtime.base });
}

const execute = (t: RuntimeTransport, command = "cat ~/.secrets") => t.execute(command, { timeout: 5, maxOutput: 100, cwd: "" });

/** The message of the refusal of a pod showing `token`; nothing but the probe reached it. */
async function refused(token: string, signer: ClusterSigner): Promise<string> {
  const t = await reached(`${AT_SESSION_IP}\nidtoken=${token}`, await serve(signer));
  try {
    let message = "";
    await assert.rejects(execute(t), (err: unknown) => {
      assert.ok(err instanceof UnverifiedPod && err instanceof WrongPod, String(err));
      message = err.message;
      return true;
    });
    assert.deepEqual(sent, [], "the command reached the pod");
    return message;
  } finally {
    t.close();
  }
}

test("a namesake at the session's IP without an identity token gets nothing: no command, upload or download", async () => {
  const t = await reached(AT_SESSION_IP, await serve(new ClusterSigner()));
  try {
    await assert.rejects(execute(t), (err: unknown) => err instanceof UnverifiedPod && /showed no identity token/.test(err.message) && err.message.includes("team-a/s-7f3k2"));
    await assert.rejects(t.upload([["/tmp/f", Buffer.from("the session's file"), ""]]), UnverifiedPod);
    await assert.rejects(t.download([["/tmp/f", ""]]), UnverifiedPod);
    assert.deepEqual(sent, []);
  } finally {
    t.close();
  }
});

test("a namesake with the cluster's token for its own namespace gets nothing (both namespaces named)", async () => {
  const signer = new ClusterSigner();
  const message = await refused(signer.token("team-b", SESSION_POD), signer);
  assert.ok(message.includes("team-b/s-7f3k2 by its identity token") && message.includes("expected the session's pod team-a/s-7f3k2"), message);
});

test("a token for another pod of the session's namespace is refused", async () => {
  const signer = new ClusterSigner("RSA");
  assert.match(await refused(signer.token("team-a", "s-other"), signer), /is team-a\/s-other by its identity token/);
});

for (const kind of ["EC", "RSA"] as const) {
  test(`the session's own pod proves itself with its token (${kind})`, async () => {
    const signer = new ClusterSigner(kind);
    const t = await reached(`${AT_SESSION_IP}\nidtoken=${signer.token("team-a", SESSION_POD)}`, await serve(signer));
    try {
      assert.equal((await execute(t, "echo hi")).output, "hi");
      assert.equal(sent.length, 1);
    } finally {
      t.close();
    }
  });
}

test("a token of another signer (the same key ID, another key) is refused", async () => {
  const forged = new ClusterSigner("EC", "k1").token("team-a", SESSION_POD);
  assert.match(await refused(forged, new ClusterSigner("EC", "k1")), /bad signature/);
  const rsa = new ClusterSigner("RSA", "k1").token("team-a", SESSION_POD);
  assert.match(await refused(rsa, new ClusterSigner("RSA", "k1")), /bad signature/);
});

test("a token whose alg does not fit the key is refused", async () => {
  const signer = new ClusterSigner("EC");
  assert.match(await refused(signer.token("team-a", SESSION_POD, { alg: "RS256" }), signer), /bad signature/);
  assert.match(await refused(signer.token("team-a", SESSION_POD, { alg: "none" }), signer), /bad signature/);
});

test("a token for another audience is refused (the pod's API token proves nothing here)", async () => {
  const signer = new ClusterSigner();
  const token = signer.token("team-a", SESSION_POD, { audience: "https://kubernetes.default.svc.cluster.local" });
  assert.match(await refused(token, signer), /is for \['https:\/\/kubernetes\.default\.svc\.cluster\.local'\], not agentsession\.dev\/pod-identity/);
});

test("an expired token, or one not yet valid, is refused (60 s of clock skew allowed)", async () => {
  const signer = new ClusterSigner();
  const now = Date.now() / 1000;
  assert.match(await refused(signer.token("team-a", SESSION_POD, { issued: now - 7200, lifetime: 600 }), signer), /expired or not yet valid/);
  assert.match(await refused(signer.token("team-a", SESSION_POD, { issued: now + 600 }), signer), /expired or not yet valid/);
  const keys = ClusterKeys.parse(signer.jwks());
  const skewed = signer.token("team-a", SESSION_POD, { issued: now - 630, lifetime: 600 }); // expired 30 s ago
  assert.equal(verifyToken(skewed, keys, now).exp, Math.floor(now - 30));
  assert.throws(() => verifyToken(signer.token("team-a", SESSION_POD, { extra: { exp: "never" } }), keys), /no validity window/);
});

test("a malformed or oversized token is refused", async () => {
  const signer = new ClusterSigner();
  assert.match(await refused("not.a-token", signer), /malformed/);
  assert.match(await refused("a".repeat(20000), signer), /too large/);
  const keys = ClusterKeys.parse(signer.jwks());
  for (const bad of ["a.b.c", "e30.W10.c2ln", "e30.e30.!!!", "...."]) assert.throws(() => verifyToken(bad, keys), /malformed/, bad);
});

test("a key the set lacks fetches the keys again on the next resolution (at most every 10 s)", async () => {
  const signer = new ClusterSigner("EC", "rotated");
  const kubeConfig = await serve(signer);
  const first = await ClusterKeys.of(kubeConfig);
  assert.equal(signer.jwksRequests, 1);
  assert.ok(first.keys.has("rotated"));
  assert.equal(await ClusterKeys.of(kubeConfig), first); // cached
  assert.equal(await ClusterKeys.of(kubeConfig, first.fetchedAt + KEYS_MAX_AGE - 1), first); // still fresh
  assert.throws(() => verifyToken(new ClusterSigner("EC", "newer").token("team-a", SESSION_POD), first), /signed by key 'newer', not one of the cluster's/);
  assert.equal(await ClusterKeys.of(kubeConfig), first); // not within REFETCH_INTERVAL
  const later = await ClusterKeys.of(kubeConfig, first.fetchedAt + REFETCH_INTERVAL + 1);
  assert.equal(signer.jwksRequests, 2);
  assert.notEqual(later, first);
  assert.equal(await ClusterKeys.of(kubeConfig, later.fetchedAt + REFETCH_INTERVAL + 1), later); // not stale any more
  await ClusterKeys.of(kubeConfig, later.fetchedAt + KEYS_MAX_AGE + 1);
  assert.equal(signer.jwksRequests, 3);
});

test("resolutions at once share one fetch of the keys", async () => {
  const signer = new ClusterSigner();
  const kubeConfig = await serve(signer);
  const all = await Promise.all([1, 2, 3].map(() => ClusterKeys.of(kubeConfig)));
  assert.equal(signer.jwksRequests, 1);
  assert.ok(all.every((keys) => keys === all[0]));
});

test("keys that cannot be read say what to allow, and nothing is sent", async () => {
  const forbidden = await startApiServer((_req, res) => {
    const status = { kind: "Status", status: "Failure", reason: "Forbidden", code: 403, message: 'forbidden: User "system:serviceaccount:app:agent" cannot get path "/openid/v1/jwks"' };
    res.writeHead(403, { "Content-Type": "application/json" }).end(JSON.stringify(status));
  });
  servers.push(forbidden);
  await assert.rejects(resolveEndpoint(view(), { kubeConfig: forbidden.kubeConfig }), (err: unknown) => {
    assert.ok(err instanceof UnverifiedPod, String(err));
    assert.match(err.message, /\/openid\/v1\/jwks.*allow `get`/s);
    assert.match(err.message, /HTTP 403: forbidden: User/);
    return true;
  });
});

test("the identity rides in every connection mode", async () => {
  const kubeConfig = await serve(new ClusterSigner());
  const routed = await resolveEndpoint(view(), { kubeConfig, connection: { mode: "router", url: "http://router.invalid:8080" } });
  assert.equal(routed.identity?.namespace, "team-a");
  assert.equal(routed.identity?.podName, SESSION_POD);
});

test("address mode trusts the name and addresses alone; any other mode is refused, naming both", async () => {
  const kubeConfig = new k8s.KubeConfig(); // never asked
  const endpoint = await resolveEndpoint(view(), { kubeConfig, podIdentity: "address" });
  assert.equal(endpoint.identity, undefined);
  showing = AT_SESSION_IP;
  const t = new RuntimeTransport({ ...endpoint, baseUrl: runtime.base });
  try {
    assert.equal((await execute(t, "echo hi")).output, "hi");
  } finally {
    t.close();
  }
  checkPodIdentity("token");
  checkPodIdentity(undefined);
  assert.throws(() => checkPodIdentity("none"), /podIdentity must be 'token' or 'address', got 'none'/);
  await assert.rejects(AgentSessionSandbox.create("s", { kubeConfig, podIdentity: "none" as never }), /'token' or 'address'/);
  assert.throws(() => new SessionManager({ kubeConfig, defaults: { podIdentity: "none" as never } }), /'token' or 'address'/);
});

test("the probe reports the token file it is given (the kubelet writes no newline), nothing without one", () => {
  const dir = mkdtempSync(join(tmpdir(), "lkc-identity-"));
  writeFileSync(join(dir, "token"), "eyJh.eyJi.c2ln");
  const script = scriptText.loadScript("probe.sh");
  for (const [path, expected] of [[join(dir, "token"), "eyJh.eyJi.c2ln"], [join(dir, "none"), ""]] as const) {
    const stdout = execFileSync("sh", ["-c", script, "lkc", ".lkc-staging", path], { cwd: dir, encoding: "utf-8" });
    assert.equal(probe.parseProbe(stdout).identityToken, expected);
  }
  assert.ok(probe.buildProbe().includes(POD_IDENTITY_TOKEN_PATH));
});
