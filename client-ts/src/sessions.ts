// The client's only Kubernetes API layer (langchain_k8s_client.sessions): AgentSession objects and nothing
// else. Create-or-attach (a contradicting spec is a SessionConflict), the Ready wait (one watch, bounded),
// the activity annotation on its own session, delete by UID. No lifecycle state: the status is the contract.
import * as k8s from "@kubernetes/client-node";
import { formatActivity } from "./activity.js";
import {
  ANNOTATION_ACTIVITY,
  API_VERSION,
  COND_EXPIRED,
  COND_FAILED,
  COND_POLICY_COMPLIANT,
  COND_READY,
  GROUP,
  Phase,
  SESSION_KIND,
  SESSION_PLURAL,
  TERMINAL_PHASES,
  VERSION,
  type AgentSession,
  type AgentSessionSpec,
  type Condition,
} from "./generated/contract.js";
import { PolicyViolation, SessionConflict, SessionExpired, SessionFailed, SessionNotFound, SessionNotReady } from "./errors.js";

export interface SessionSpecOptions {
  warmPool?: string;
  ttl?: string;
  idleTimeout?: string;
  idleAction?: "Delete" | "Suspend" | "Hibernate";
  env?: Record<string, string>;
  labels?: Record<string, string>;
  podLabels?: Record<string, string>;
  podAnnotations?: Record<string, string>;
  volumeClaimTemplates?: AgentSessionSpec["volumeClaimTemplates"];
  /** metadata.labels of the AgentSession itself. */
  sessionLabels?: Record<string, string>;
  forkFrom?: string;
}

/** The spec a create sends (SessionSpec.to_spec). */
export function toSpec(o: SessionSpecOptions): Record<string, unknown> {
  const spec: Record<string, unknown> = {};
  if (o.warmPool) spec.warmPoolRef = { name: o.warmPool };
  if (o.ttl !== undefined) spec.ttl = o.ttl;
  if (o.idleTimeout !== undefined) spec.idleTimeout = o.idleTimeout;
  if (o.idleAction !== undefined) spec.idleAction = o.idleAction;
  if (o.env && Object.keys(o.env).length) spec.env = Object.entries(o.env).map(([name, value]) => ({ name, value }));
  if (o.labels && Object.keys(o.labels).length) spec.labels = { ...o.labels };
  if (o.podLabels && Object.keys(o.podLabels).length) spec.podLabels = { ...o.podLabels };
  if (o.podAnnotations && Object.keys(o.podAnnotations).length) spec.podAnnotations = { ...o.podAnnotations };
  if (o.volumeClaimTemplates?.length) spec.volumeClaimTemplates = [...o.volumeClaimTemplates];
  if (o.forkFrom) spec.forkFrom = { name: o.forkFrom };
  return spec;
}

function stableJson(value: unknown): string {
  if (Array.isArray(value)) return "[" + value.map(stableJson).join(",") + "]";
  if (value && typeof value === "object") {
    return "{" + Object.keys(value).sort().map((k) => JSON.stringify(k) + ":" + stableJson((value as Record<string, unknown>)[k])).join(",") + "}";
  }
  return JSON.stringify(value ?? null);
}

/** Fields given here that the existing session's spec contradicts (unset fields never conflict). */
export function conflicts(o: SessionSpecOptions, existing: AgentSession): string[] {
  const have = (existing.spec ?? {}) as Record<string, unknown>;
  const out: string[] = [];
  for (const [key, value] of Object.entries(toSpec(o))) {
    if (key === "env") {
      const current = Object.fromEntries(((have.env as Array<{ name: string; value?: string }>) ?? []).map((e) => [e.name, e.value ?? null]));
      if (stableJson(current) !== stableJson(o.env ?? {})) {
        out.push(`spec.env is ${JSON.stringify(Object.keys(current).sort())} on the cluster, ${JSON.stringify(Object.keys(o.env ?? {}).sort())} here`);
      }
    } else if (stableJson(have[key]) !== stableJson(value)) {
      out.push(`spec.${key} is ${JSON.stringify(have[key] ?? null)} on the cluster, ${JSON.stringify(value)} here`);
    }
  }
  return out;
}

/** What the status says about reaching the pod (SessionView). */
export interface SessionView {
  name: string;
  namespace: string;
  uid: string;
  phase: string | null;
  podName: string | null;
  podIPs: string[];
  sandboxName: string | null;
  idleTimeout: string | null;
  conditions: Condition[];
  suspendRequested: boolean;
  ready: boolean;
  finished: boolean;
}

/** One step of a long wait (Ready, a resume, a phase): what the status says now (langchain_k8s_client.WaitProgress). */
export interface WaitProgress {
  namespace: string;
  name: string;
  /** The status's phase, "Pending" before the operator wrote one. */
  phase: string;
  /** The Ready condition's reason and message ("" when there is none yet). */
  reason: string;
  message: string;
  /** Seconds since the wait began. */
  elapsed: number;
}

/** `agentsession/<name>: <phase> (<reason>: <message>) after <n> s`, as the Python client and the CLI print it. */
export function describeProgress(p: WaitProgress): string {
  const said = p.reason && p.message ? ` (${p.reason}: ${p.message})` : p.reason ? ` (${p.reason})` : "";
  return `agentsession/${p.name}: ${p.phase}${said} after ${Math.round(p.elapsed)} s`;
}

/** Reports a wait's steps once each: a new phase, or a new Ready reason or message. */
class ProgressReporter {
  private readonly started = Date.now();
  private last: WaitProgress | undefined;

  constructor(private readonly callback?: (step: WaitProgress) => void) {}

  see(view: SessionView): void {
    if (!this.callback) return;
    const ready = condition(view, COND_READY);
    const step: WaitProgress = {
      namespace: view.namespace,
      name: view.name,
      phase: view.phase ?? Phase.PENDING,
      reason: ready?.reason ?? "",
      message: ready?.message ?? "",
      elapsed: (Date.now() - this.started) / 1000,
    };
    const last = this.last;
    if (last && last.phase === step.phase && last.reason === step.reason && last.message === step.message) return;
    this.last = step;
    this.callback(step);
  }
}

export function viewOf(body: AgentSession): SessionView {
  const meta = (body.metadata ?? {}) as { name?: string; namespace?: string; uid?: string };
  const status = body.status ?? {};
  const phase = status.phase ?? null;
  const podIPs = [...(status.podIPs ?? [])];
  const podName = status.podName ?? null;
  return {
    name: meta.name ?? "",
    namespace: meta.namespace ?? "",
    uid: meta.uid ?? "",
    phase,
    podName,
    podIPs,
    sandboxName: status.sandboxName ?? null,
    idleTimeout: status.resolved?.idleTimeout ?? body.spec?.idleTimeout ?? null,
    conditions: [...(status.conditions ?? [])],
    suspendRequested: Boolean(body.spec?.suspend),
    ready: phase === Phase.READY && podIPs.length > 0 && Boolean(podName),
    finished: (TERMINAL_PHASES as readonly string[]).includes(phase ?? ""),
  };
}

const condition = (view: SessionView, type: string) => view.conditions.find((c) => c.type === type);

/** A typed error for a session that will never become Ready by waiting. */
export function raiseForTerminal(view: SessionView): void {
  const ready = condition(view, COND_READY);
  const who = `AgentSession ${view.namespace}/${view.name}: `;
  if (view.phase === Phase.EXPIRED) {
    const c = condition(view, COND_EXPIRED) ?? ready;
    throw new SessionExpired(c?.reason ?? "Expired", who + (c?.message ?? "the session has ended"));
  }
  if (view.phase === Phase.FAILED) {
    const policy = condition(view, COND_POLICY_COMPLIANT);
    if (policy && policy.status === "False") throw new PolicyViolation(policy.reason ?? "PolicyViolation", who + (policy.message ?? ""));
    const c = condition(view, COND_FAILED) ?? ready;
    throw new SessionFailed(c?.reason ?? "Failed", who + (c?.message ?? ""));
  }
}

export function loadKubeConfig(kubeConfig?: k8s.KubeConfig): k8s.KubeConfig {
  if (kubeConfig) return kubeConfig;
  const kc = new k8s.KubeConfig();
  kc.loadFromDefault(); // in-cluster when there, else $KUBECONFIG / ~/.kube/config
  return kc;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const MERGE_PATCH = k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch);

function statusOf(err: unknown): number | undefined {
  return err instanceof k8s.ApiException ? err.code : undefined;
}

export class SessionStore {
  readonly kubeConfig: k8s.KubeConfig;
  private readonly api: k8s.CustomObjectsApi;

  constructor(kubeConfig?: k8s.KubeConfig) {
    this.kubeConfig = loadKubeConfig(kubeConfig);
    this.api = this.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  }

  private params(namespace: string) {
    return { group: GROUP, version: VERSION, namespace, plural: SESSION_PLURAL };
  }

  async get(namespace: string, name: string): Promise<AgentSession | null> {
    try {
      return (await this.api.getNamespacedCustomObject({ ...this.params(namespace), name })) as AgentSession;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw err;
    }
  }

  async require(namespace: string, name: string): Promise<AgentSession> {
    const body = await this.get(namespace, name);
    if (!body) throw new SessionNotFound("NotFound", `AgentSession ${namespace}/${name} does not exist`);
    return body;
  }

  async list(namespace: string, labels: Record<string, string> = {}): Promise<AgentSession[]> {
    const labelSelector = Object.entries(labels).map(([k, v]) => `${k}=${v}`).join(",");
    const result = (await this.api.listNamespacedCustomObject({ ...this.params(namespace), labelSelector })) as { items?: AgentSession[] | null };
    return result.items ?? [];
  }

  /** The session and whether this call created it; an existing one must not contradict `spec`. */
  async getOrCreate(namespace: string, name: string, spec: SessionSpecOptions): Promise<{ body: AgentSession; created: boolean }> {
    if (!DNS_LABEL.test(name)) {
      throw new RangeError(`session name '${name}' must be a DNS label: lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit`);
    }
    let existing = await this.get(namespace, name);
    if (!existing) {
      const body = {
        apiVersion: API_VERSION,
        kind: SESSION_KIND,
        metadata: { name, namespace, labels: { ...(spec.sessionLabels ?? {}) } },
        spec: toSpec(spec),
      };
      try {
        return { body: (await this.api.createNamespacedCustomObject({ ...this.params(namespace), body })) as AgentSession, created: true };
      } catch (err) {
        const code = statusOf(err);
        if (code === 409) existing = await this.get(namespace, name); // another process created it first
        else if (code === 400 || code === 403 || code === 422) throw refusal(name, err as k8s.ApiException<unknown>);
        else throw err;
      }
    }
    if (!existing) throw new SessionNotFound("NotFound", `AgentSession ${namespace}/${name} vanished while attaching`);
    const found = conflicts(spec, existing);
    if (found.length) throw new SessionConflict("SpecMismatch", `AgentSession ${namespace}/${name} exists with another spec: ${found.join("; ")}`);
    return { body: existing, created: false };
  }

  /** Watch the session until it is Ready with a pod IP (typed errors for terminal states), at most `timeout` s;
   * each new step (phase, Ready reason or message) goes to `onProgress`. */
  async waitReady(namespace: string, name: string, timeout: number, onProgress?: (step: WaitProgress) => void): Promise<SessionView> {
    const deadline = Date.now() + timeout * 1000;
    const progress = new ProgressReporter(onProgress);
    let body = await this.require(namespace, name);
    let view = viewOf(body);
    for (;;) {
      progress.see(view);
      if (view.ready) return view;
      raiseForTerminal(view);
      const remaining = (deadline - Date.now()) / 1000;
      if (remaining <= 0) {
        const ready = condition(view, COND_READY);
        const said = ready?.message || view.phase || "no status from the operator yet";
        throw new SessionNotReady(ready?.reason ?? view.phase ?? Phase.PENDING, `not Ready after ${Math.round(timeout)} s: ${said}`);
      }
      const rv = (body.metadata as { resourceVersion?: string }).resourceVersion;
      const next = await this.watchOnce(namespace, name, rv, remaining, (seen) => progress.see(seen));
      if (next === "gone") body = await this.require(namespace, name); // history expired: start again from now
      else if (next !== null) body = next;
      view = viewOf(body);
    }
  }

  /** One watch until the session is Ready or finished, or `seconds` pass (null); "gone" on 410. */
  private async watchOnce(
    namespace: string,
    name: string,
    resourceVersion: string | undefined,
    seconds: number,
    onChange: (view: SessionView) => void = () => undefined,
  ): Promise<AgentSession | null | "gone"> {
    const path = `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${SESSION_PLURAL}`;
    const watch = new k8s.Watch(this.kubeConfig);
    let latest: AgentSession | null = null;
    return new Promise((resolve, reject) => {
      let controller: AbortController | undefined;
      let done = false;
      const finish = (fn: () => void) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        controller?.abort();
        fn();
      };
      const timer = setTimeout(() => finish(() => resolve(latest)), Math.max(1, seconds) * 1000 + 1000);
      watch
        .watch(
          path,
          { fieldSelector: `metadata.name=${name}`, resourceVersion, timeoutSeconds: Math.max(1, Math.floor(seconds)), allowWatchBookmarks: false },
          (type, obj: AgentSession & { code?: number }) => {
            if (type === "DELETED") return finish(() => reject(new SessionNotFound("Deleted", `AgentSession ${namespace}/${name} was deleted`)));
            if (type === "ERROR") return finish(() => (obj.code === 410 ? resolve("gone") : reject(new Error(`watch error: ${JSON.stringify(obj)}`))));
            latest = obj;
            const view = viewOf(obj);
            if (view.ready || view.finished) finish(() => resolve(latest));
            else onChange(view);
          },
          (err: unknown) =>
            finish(() => {
              const code = statusOf(err) ?? (err as { statusCode?: number } | null)?.statusCode;
              if (code === 410) resolve("gone");
              else if (err && !(err instanceof Error && err.name === "AbortError")) reject(err);
              else resolve(latest); // closed by the server at timeoutSeconds, or by us
            }),
        )
        .then((c) => {
          controller = c;
          if (done) c.abort();
        }, (err) => finish(() => reject(err)));
    });
  }

  /** Poll until the session reaches `phase` (typed errors when it finishes instead), at most `timeout` s. */
  async waitPhase(
    namespace: string,
    name: string,
    phase: string,
    timeout: number,
    interval = 0.5,
    onProgress?: (step: WaitProgress) => void,
  ): Promise<SessionView> {
    const deadline = Date.now() + timeout * 1000;
    const progress = new ProgressReporter(onProgress);
    for (;;) {
      const view = viewOf(await this.require(namespace, name));
      progress.see(view);
      if (view.phase === phase) return view;
      raiseForTerminal(view);
      if (Date.now() >= deadline) throw new SessionNotReady(view.phase ?? Phase.PENDING, `not ${phase} after ${Math.round(timeout)} s`);
      await new Promise((r) => setTimeout(r, interval * 1000));
    }
  }

  async setSuspend(namespace: string, name: string, value: boolean): Promise<void> {
    await this.api.patchNamespacedCustomObject({ ...this.params(namespace), name, body: { spec: { suspend: value } } }, MERGE_PATCH);
  }

  /** One merge patch of one annotation; returns the session as the PATCH answered it (status included). */
  async reportActivity(namespace: string, name: string, busySeconds = 0): Promise<AgentSession | null> {
    const patch = { metadata: { annotations: { [ANNOTATION_ACTIVITY]: formatActivity(new Date(), busySeconds) } } };
    const answer = await this.api.patchNamespacedCustomObject({ ...this.params(namespace), name, body: patch }, MERGE_PATCH);
    return answer && typeof answer === "object" ? (answer as AgentSession) : null;
  }

  async delete(namespace: string, name: string, uid?: string): Promise<boolean> {
    try {
      await this.api.deleteNamespacedCustomObject({ ...this.params(namespace), name, body: uid ? { preconditions: { uid } } : {} });
      return true;
    } catch (err) {
      const code = statusOf(err);
      if (code === 404 || code === 409) return false;
      throw err;
    }
  }
}

function refusal(name: string, err: k8s.ApiException<unknown>): Error {
  let message = err.message;
  try {
    const body = typeof err.body === "string" ? JSON.parse(err.body) : err.body;
    if (body && typeof body === "object" && typeof (body as { message?: unknown }).message === "string") message = (body as { message: string }).message;
  } catch {
    // keep the exception's own message
  }
  if (message.includes("AgentSessionPolicy")) return new PolicyViolation("AdmissionRefused", message);
  return new RangeError(`AgentSession ${name} refused by the API server: ${message}`);
}
