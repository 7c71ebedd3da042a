// SessionManager: one AgentSession per LangGraph thread, from any process or replica, in any language:
// the session name is a pure function of the thread id, the same one as langchain_k8s_client.manager's
// (test/cross-language.test.ts runs both).
import { createHash } from "node:crypto";
import type * as k8s from "@kubernetes/client-node";
import { createDeepAgent as createAgent } from "deepagents";
import { GROUP } from "./generated/contract.js";
import { checkPodIdentity } from "./identity.js";
import { AgentSessionSandbox, forkSession, type AgentSessionSandboxOptions } from "./sandbox.js";
import { SessionStore, viewOf, type SessionView } from "./sessions.js";

export const THREAD_LABEL = `${GROUP}/thread-hash`;
export const MANAGER_LABEL = `${GROUP}/managed-by`;
export const MANAGER_VALUE = "langchain-k8s-client"; // the same value: either client lists the other's sessions

const sha256 = (text: string) => createHash("sha256").update(text, "utf-8").digest("hex");

/** `<prefix>-<slug>-<hash10>`: deterministic, at most 63 characters, a lowercase DNS label. */
export function sessionName(threadId: string, prefix = "thread"): string {
  if (!threadId) throw new RangeError("threadId must not be empty");
  if (!/^[a-z]([-a-z0-9]{0,20}[a-z0-9])?$/.test(prefix)) throw new RangeError("prefix must be a short lowercase DNS label (at most 22 characters)");
  const digest = sha256(threadId).slice(0, 10);
  const slug = threadId.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");
  const room = 63 - prefix.length - digest.length - 2;
  const cut = slug.slice(0, Math.max(room - 1, 0)).replace(/^-+|-+$/g, "");
  return cut ? `${prefix}-${cut}-${digest}` : `${prefix}-${digest}`;
}

export function threadHash(threadId: string): string {
  return sha256(threadId).slice(0, 40);
}

export interface SessionManagerOptions {
  namespace?: string;
  prefix?: string;
  /** Put on every AgentSession it creates. */
  labels?: Record<string, string>;
  kubeConfig?: k8s.KubeConfig;
  /** AgentSessionSandbox options for new sessions (warmPool, ttl, idleTimeout, env, connection, podIdentity, ...). */
  defaults?: AgentSessionSandboxOptions;
}

export class SessionManager {
  readonly namespace: string;
  readonly prefix: string;
  private readonly store: SessionStore;

  constructor(private readonly options: SessionManagerOptions = {}) {
    this.namespace = options.namespace ?? "default";
    this.prefix = options.prefix ?? "thread";
    checkPodIdentity(options.defaults?.podIdentity);
    this.store = new SessionStore(options.kubeConfig);
  }

  nameFor(threadId: string): string {
    return sessionName(threadId, this.prefix);
  }

  private labelsFor(threadId: string): Record<string, string> {
    return { ...(this.options.labels ?? {}), [THREAD_LABEL]: threadHash(threadId), [MANAGER_LABEL]: MANAGER_VALUE };
  }

  /** The thread's backend: its existing session, or a new one. */
  get(threadId: string, overrides: AgentSessionSandboxOptions = {}): Promise<AgentSessionSandbox> {
    return AgentSessionSandbox.create(this.nameFor(threadId), {
      ...this.options.defaults,
      ...overrides,
      namespace: this.namespace,
      sessionLabels: this.labelsFor(threadId),
      kubeConfig: this.store.kubeConfig,
    });
  }

  /** The new thread's backend, on a fork of `threadId`'s session (its volumes copied; see
   * AgentSessionSandbox.fork). The manager's defaults apply, except volumes (the source's are copied). */
  fork(threadId: string, newThreadId: string, overrides: AgentSessionSandboxOptions & { suspendSource?: boolean } = {}): Promise<AgentSessionSandbox> {
    const { volumeClaimTemplates: _ignored, ...defaults } = { ...this.options.defaults, ...overrides };
    return forkSession(this.nameFor(threadId), this.nameFor(newThreadId), {
      ...defaults,
      namespace: this.namespace,
      sessionLabels: this.labelsFor(newThreadId),
      kubeConfig: this.store.kubeConfig,
    });
  }

  /** Sessions this manager created (optionally narrowed by more labels). */
  async list(labels: Record<string, string> = {}): Promise<SessionView[]> {
    const selector = { [MANAGER_LABEL]: MANAGER_VALUE, ...(this.options.labels ?? {}), ...labels };
    return (await this.store.list(this.namespace, selector)).map(viewOf);
  }

  /** Delete the thread's AgentSession; false when there was none. */
  delete(threadId: string): Promise<boolean> {
    return this.store.delete(this.namespace, this.nameFor(threadId));
  }

  /** A deep agent whose sandbox is the thread's session (`params` go to deepagents' createDeepAgent). */
  async createDeepAgent(threadId: string, params: Omit<NonNullable<Parameters<typeof createAgent>[0]>, "backend"> = {}) {
    const backend = await this.get(threadId);
    return { agent: createAgent({ ...params, backend }), backend };
  }
}

/** deepagents' createDeepAgent with an AgentSession as its sandbox (created or attached by name). */
export async function createDeepAgent(
  session: string | AgentSessionSandbox,
  params: Omit<NonNullable<Parameters<typeof createAgent>[0]>, "backend"> = {},
  options: AgentSessionSandboxOptions = {},
) {
  const backend = typeof session === "string" ? await AgentSessionSandbox.create(session, options) : session;
  return { agent: createAgent({ ...params, backend }), backend };
}
