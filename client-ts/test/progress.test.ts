import assert from "node:assert/strict";
import { test } from "node:test";
import * as k8s from "@kubernetes/client-node";
import type { AgentSession } from "../src/generated/contract.js";
import { describeProgress, SessionStore, type WaitProgress } from "../src/sessions.js";

function session(phase: string | undefined, reason?: string, message = "m"): AgentSession {
  const conditions = reason ? [{ type: "Ready", status: "False", reason, message, lastTransitionTime: "2026-12-01T11:55:00Z" }] : [];
  return {
    apiVersion: "agentsession.dev/v1alpha1",
    kind: "AgentSession",
    metadata: { name: "s", namespace: "n", uid: "u" },
    spec: {},
    status: phase ? { phase, conditions } : undefined,
  } as unknown as AgentSession;
}

/** A store whose reads play a script (no cluster): waitPhase polls through `require`. */
class ScriptedStore extends SessionStore {
  constructor(private readonly bodies: AgentSession[]) {
    const config = new k8s.KubeConfig();
    config.loadFromOptions({
      clusters: [{ name: "c", server: "https://127.0.0.1:1" }],
      users: [{ name: "u" }],
      contexts: [{ name: "x", cluster: "c", user: "u" }],
      currentContext: "x",
    });
    super(config);
  }
  override async require(): Promise<AgentSession> {
    const next = this.bodies.shift();
    assert.ok(next, "polled past the script");
    return next;
  }
}

test("a long wait reports each new step once (issue 52 item 4), as the Python client words it", async () => {
  const store = new ScriptedStore([
    session(undefined),
    session("Pending", "WaitingForPool"),
    session("Pending", "WaitingForPool"),
    session("Pending", "ClaimPending"),
    session("Suspended"),
  ]);
  const steps: WaitProgress[] = [];
  const view = await store.waitPhase("n", "s", "Suspended", 30, 0, (step) => steps.push(step));
  assert.equal(view.phase, "Suspended");
  assert.deepEqual(
    steps.map((p) => [p.phase, p.reason]),
    [
      ["Pending", ""],
      ["Pending", "WaitingForPool"],
      ["Pending", "ClaimPending"],
      ["Suspended", ""],
    ],
  );
  assert.match(describeProgress(steps[1]!), /^agentsession\/s: Pending \(WaitingForPool: m\) after \d+ s$/);
  assert.equal(describeProgress({ ...steps[3]!, elapsed: 2.4 }), "agentsession/s: Suspended after 2 s");
});
