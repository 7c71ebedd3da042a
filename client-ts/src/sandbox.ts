// AgentSessionSandbox: the deepagents JS sandbox backend over an AgentSession (the twin of
// langchain_k8s_client.backend.AgentSessionSandbox). Creating one creates the AgentSession when absent or
// attaches to it when present; the first operation waits for Ready (one watch), then talks to the pod the
// status names, after checking the runtime's hostname is that pod's name. Every operation reports activity
// on this session (throttled, busy window before a command); a session idle-suspended is woken on use.
import type * as k8s from "@kubernetes/client-node";
import {
  BaseSandbox,
  type EditResult,
  type ExecuteResponse,
  type FileDownloadResponse,
  type FileInfo,
  type FileOperationError,
  type FileUploadResponse,
  type LsResult,
} from "deepagents";
import * as scripts from "./scripts.js";
import type { RuntimeExec } from "./transport.js";
import { ActivityThrottle, intervalFor, parseSeconds } from "./activity.js";
import { SessionNotReady } from "./errors.js";
import { IdleAction, Phase, type AgentSession } from "./generated/contract.js";
import { raiseForTerminal, SessionStore, viewOf, type SessionSpecOptions, type SessionView } from "./sessions.js";
import { RuntimeTransport, type PodEndpoint, type ResponseLimits } from "./transport.js";

export const RUNTIME_PORT = 8888;
export const DEFAULT_COMMAND_TIMEOUT = 300;
export const MAX_COMMAND_TIMEOUT = 3600;
export const DEFAULT_MAX_OUTPUT = 1024 * 1024;

export interface AgentSessionSandboxOptions extends Omit<SessionSpecOptions, "ttl" | "idleTimeout"> {
  namespace?: string;
  /** Go-style duration ("2h") or seconds. */
  ttl?: string | number;
  idleTimeout?: string | number;
  /** Seconds to wait for Ready before SessionNotReady (default 180). */
  readyTimeout?: number;
  /** Bytes of execute output kept (default 1 MiB); more sets truncated and is cut in the pod. */
  maxOutputSize?: number;
  /** Default execute timeout in seconds (default 300, at most 3600), enforced inside the pod. */
  commandTimeout?: number;
  /** Working directory of execute (default: the runtime's base directory). */
  workingDir?: string;
  /** Bounds on every answer of the pod (default 256 MiB, read timeout + 30 s). */
  responseLimits?: ResponseLimits;
  /** Default: in-cluster config, else $KUBECONFIG / ~/.kube/config. */
  kubeConfig?: k8s.KubeConfig;
  /** Called with a warning when an activity report fails (the operation itself goes on). */
  onWarning?: (message: string) => void;
}

/** "2h" stays, 7200 becomes "7200s" (durations.normalize). */
export function normalizeDuration(value: string | number | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value === "number") {
    if (!(value > 0)) throw new RangeError(`a duration must be positive, got ${value}`);
    return `${value}s`;
  }
  const seconds = parseSeconds(value);
  if (seconds === null || seconds <= 0) throw new RangeError(`'${value}' is not a positive duration: use Go syntax such as 30m, 2h or 1h30m`);
  return value;
}

function checkTimeout(timeout: number): number {
  if (!Number.isInteger(timeout) || timeout < 0 || timeout > MAX_COMMAND_TIMEOUT) {
    throw new RangeError(`timeout must be an integer between 0 and ${MAX_COMMAND_TIMEOUT} seconds, got ${timeout}`);
  }
  return timeout === 0 ? MAX_COMMAND_TIMEOUT : timeout;
}

function pathError(path: string): FileOperationError | null {
  if (!path || path.includes("\0") || !path.startsWith("/")) return "invalid_path";
  return null;
}

const FILE_ERRORS = new Set(["file_not_found", "permission_denied", "is_directory", "invalid_path"]);
const asFileError = (code: string | null): FileOperationError | null =>
  code === null ? null : FILE_ERRORS.has(code) ? (code as FileOperationError) : "permission_denied";

function failure(raw: RuntimeExec): string {
  const text = (raw.stderr || raw.stdout).trim();
  if (text.includes("python3") && (text.includes("No such file") || text.includes("not found"))) return "python3 is not installed in the sandbox image";
  return text.slice(0, 300) || `exit code ${raw.exitCode}`;
}

const EDIT_MESSAGES: Record<string, string> = {
  file_not_found: "Error: File '{path}' not found",
  permission_denied: "Error: Permission denied editing file '{path}'",
  invalid_path: "Error: invalid_path: '{path}' leads outside the allowed root",
  not_a_file: "Error: '{path}' is not a regular file",
  not_a_text_file: "Error: File '{path}' is not a text file",
  string_not_found: "Error: String not found in file: '{old}'",
  multiple_occurrences: "Error: String '{old}' appears multiple times ({count} occurrences). Use replace_all=True to replace all occurrences.",
};

function editResult(raw: RuntimeExec, filePath: string, oldString: string): EditResult {
  const lines = raw.stdout.trim().split(/\r\n|\r|\n/);
  let data: Record<string, unknown> | null = null;
  try {
    const parsed: unknown = JSON.parse(lines[lines.length - 1] ?? "");
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) data = parsed as Record<string, unknown>;
  } catch {
    data = null;
  }
  const count = data?.count ?? 1;
  if (!data || (!Number.isInteger(count) && !("error" in data))) return { error: `Error editing file '${filePath}': ${failure(raw)}` };
  if ("error" in data) {
    const error = String(data.error).slice(0, 200);
    const template = EDIT_MESSAGES[error] ?? "Error editing file '{path}': {error} {detail}";
    const text = template
      .replace("{path}", filePath)
      .replace("{old}", oldString)
      .replace("{count}", String(data.count ?? "").slice(0, 20))
      .replace("{error}", error)
      .replace("{detail}", String(data.detail ?? "").slice(0, 200));
    return { error: text.trimEnd() };
  }
  return { path: filePath, occurrences: count as number };
}

export class AgentSessionSandbox extends BaseSandbox {
  readonly id: string;
  readonly namespace: string;
  readonly uid: string;
  readonly created: boolean;
  readonly transport: RuntimeTransport;
  private readonly throttle: ActivityThrottle;

  private constructor(
    private readonly store: SessionStore,
    body: AgentSession,
    created: boolean,
    private readonly options: AgentSessionSandboxOptions,
  ) {
    super();
    const view = viewOf(body);
    this.id = view.name;
    this.namespace = view.namespace;
    this.uid = view.uid;
    this.created = created;
    this.throttle = new ActivityThrottle(intervalFor(view.idleTimeout));
    // Never contacted: marked stale at once, so the first operation resolves the session's pod.
    this.transport = new RuntimeTransport({ baseUrl: "http://unresolved.invalid" }, { resolveEndpoint: () => this.resolveEndpoint(), limits: options.responseLimits });
    this.transport.markStale();
  }

  /** Create the AgentSession `name` or attach to it (SessionConflict when its spec contradicts `options`). */
  static async create(name: string, options: AgentSessionSandboxOptions = {}): Promise<AgentSessionSandbox> {
    if (options.idleAction !== undefined && !Object.values(IdleAction).includes(options.idleAction)) {
      throw new RangeError(`idleAction must be one of ${Object.values(IdleAction).join(", ")}, got '${options.idleAction}'`);
    }
    if (options.maxOutputSize !== undefined && !(options.maxOutputSize >= 1)) throw new RangeError("maxOutputSize must be positive");
    if (options.commandTimeout !== undefined) checkTimeout(options.commandTimeout);
    if (options.workingDir !== undefined && !options.workingDir.startsWith("/")) throw new RangeError("workingDir must be absolute");
    const store = new SessionStore(options.kubeConfig);
    const spec: SessionSpecOptions = { ...options, ttl: normalizeDuration(options.ttl), idleTimeout: normalizeDuration(options.idleTimeout) };
    const { body, created } = await store.getOrCreate(options.namespace ?? "default", name, spec);
    raiseForTerminal(viewOf(body));
    return new AgentSessionSandbox(store, body, created, options);
  }

  /** The session as the cluster has it now (one GET). */
  async session(): Promise<SessionView> {
    return viewOf(await this.store.require(this.namespace, this.id));
  }

  /** Wait until the session is Ready (typed errors otherwise). */
  waitReady(timeout?: number): Promise<SessionView> {
    return this.store.waitReady(this.namespace, this.id, timeout ?? this.options.readyTimeout ?? 180);
  }

  private async resolveEndpoint(): Promise<PodEndpoint> {
    let view = await this.session();
    if (view.phase === Phase.SUSPENDED) {
      if (view.suspendRequested) {
        throw new SessionNotReady("Suspended", `AgentSession ${this.namespace}/${this.id} is suspended by spec.suspend=true; set it to false to run it again`);
      }
      await this.sendActivity(this.throttle.wake()); // idle-suspended: activity is what wakes it
    }
    view = await this.waitReady();
    this.throttle.interval = intervalFor(view.idleTimeout);
    return { baseUrl: `http://${view.podIPs[0]}:${RUNTIME_PORT}`, expectedHostname: view.podName ?? undefined };
  }

  private async reportActivity(busySeconds: number | null): Promise<void> {
    const busy = this.throttle.claim(busySeconds);
    if (busy === null) return;
    const answer = await this.sendActivity(busy);
    // Not Ready any more (suspended since the last call): ask where the pod is before this call.
    if (answer?.status && answer.status.phase !== Phase.READY) this.transport.markStale();
  }

  private async sendActivity(busy: number): Promise<AgentSession | null> {
    try {
      return await this.store.reportActivity(this.namespace, this.id, busy);
    } catch (err) {
      this.throttle.forget(); // the operation must not fail on its activity report
      this.options.onWarning?.(`could not report activity on AgentSession ${this.namespace}/${this.id}: ${err}`);
      return null;
    }
  }

  /** Run `command` with `sh -c` in the pod; output is stdout+stderr in order. Never re-sent on a failure. */
  async execute(command: string, options: { timeout?: number } = {}): Promise<ExecuteResponse> {
    const timeout = checkTimeout(options.timeout ?? this.options.commandTimeout ?? DEFAULT_COMMAND_TIMEOUT);
    await this.reportActivity(timeout);
    const result = await this.transport.execute(command, {
      timeout,
      maxOutput: this.options.maxOutputSize ?? DEFAULT_MAX_OUTPUT,
      cwd: this.options.workingDir ?? "",
    });
    return { output: result.output, exitCode: result.exitCode, truncated: result.truncated };
  }

  /** Write files of any size and bytes; parents are created, existing files overwritten. */
  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    const out: FileUploadResponse[] = files.map(([path]) => ({ path, error: pathError(path) }));
    const items: Array<[string, Uint8Array, string]> = [];
    const positions: number[] = [];
    files.forEach(([path, content], i) => {
      if (out[i]!.error === null) {
        items.push([path, content, ""]);
        positions.push(i);
      }
    });
    await this.reportActivity(null);
    if (items.length) (await this.transport.upload(items)).forEach((code, i) => (out[positions[i]!]!.error = asFileError(code)));
    return out;
  }

  /** Read files byte-exact; errors: file_not_found, is_directory, permission_denied, invalid_path. */
  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    const out: FileDownloadResponse[] = paths.map((path) => ({ path, content: null, error: pathError(path) }));
    const items: Array<[string, string]> = [];
    const positions: number[] = [];
    paths.forEach((path, i) => {
      if (out[i]!.error === null) {
        items.push([path, ""]);
        positions.push(i);
      }
    });
    await this.reportActivity(null);
    if (items.length) {
      (await this.transport.download(items)).forEach((r, i) => {
        out[positions[i]!]!.content = r.content;
        out[positions[i]!]!.error = asFileError(r.error);
      });
    }
    return out;
  }

  /** List a directory in one python3 run: the Python client's scripts/ls.py. */
  override async ls(path: string): Promise<LsResult> {
    const refused = pathError(path);
    if (refused) return { error: `Path '${path}': ${refused}` };
    await this.reportActivity(null);
    const raw = await this.transport.run(() => this.transport.script(scripts.buildLs(path, ""), true), true);
    const answer = scripts.parseJsonLines(raw.stdout);
    if (answer.error !== null) return { error: `Path '${path}': ${answer.error}` };
    if (answer.done === null) return { error: `Path '${path}': ls failed in the sandbox: ${failure(raw)}` };
    const base = path.replace(/\/+$/, "");
    const files: FileInfo[] = [];
    for (const rec of answer.records) {
      if (typeof rec.n !== "string") continue;
      const info: FileInfo = { path: `${base}/${rec.n}`, is_dir: rec.d === true };
      if (Number.isInteger(rec.s)) info.size = rec.s as number;
      if (typeof rec.m === "number") info.modified_at = new Date(rec.m * 1000).toISOString();
      files.push(info);
    }
    files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    return { files };
  }

  /** Replace `oldString` in the file inside the pod (the file never crosses the wire): scripts/edit.py. */
  override async edit(filePath: string, oldString: string, newString: string, replaceAll = false): Promise<EditResult> {
    if (!oldString) return { error: "Error: old_string cannot be empty" };
    const refused = pathError(filePath);
    if (refused) return { error: `Error: cannot edit '${filePath}': ${refused}` };
    const payload = scripts.editPayload(filePath, oldString, newString, replaceAll, "");
    await this.reportActivity(null);
    let raw: RuntimeExec;
    if (Buffer.byteLength(payload) <= scripts.EDIT_INLINE_MAX) {
      raw = await this.transport.run(() => this.transport.script(scripts.buildEdit(payload), false), false);
    } else {
      const staged = `/tmp/.lkc-edit-${crypto.randomUUID()}`; // edit.py removes it after reading
      const [up] = await this.transport.upload([[staged, Buffer.from(payload, "ascii"), ""]]);
      if (up) return { error: `Error editing file '${filePath}': staging the edit failed: ${up}` };
      raw = await this.transport.run(() => this.transport.script(scripts.buildEdit(staged), false), false);
    }
    return editResult(raw, filePath, oldString);
  }

  /** Probe the runtime now; WrongPod when it is not the pod the status names. */
  async checkIdentity() {
    await this.transport.run(async () => undefined, true);
    return this.transport.checkIdentity();
  }

  /** Delete the AgentSession (only this one: the UID is a precondition). */
  deleteSession(): Promise<boolean> {
    return this.store.delete(this.namespace, this.id, this.uid);
  }

  close(): void {
    this.transport.close();
  }
}
