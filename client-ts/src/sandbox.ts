// AgentSessionSandbox: the deepagents JS sandbox backend over an AgentSession (the twin of
// langchain_k8s_client.backend.AgentSessionSandbox). Creating one creates the AgentSession when absent or
// attaches to it when present; the first operation waits for Ready (one watch), then talks to the pod the
// status names, after checking it is that pod (its identity token, name and addresses). Every operation reports
// activity on this session (throttled, busy window before a command); a session idle-suspended is woken on use.
import { AsyncLocalStorage } from "node:async_hooks";
import type * as k8s from "@kubernetes/client-node";
import {
  BaseSandbox,
  type DeleteResult,
  type EditResult,
  type GlobResult,
  type GrepMatch,
  type GrepResult,
  type ReadResult,
  type WriteResult,
  type ExecuteResponse,
  type FileDownloadResponse,
  type FileInfo,
  type FileOperationError,
  type FileUploadResponse,
  type LsResult,
} from "deepagents";
import * as scripts from "./scripts.js";
import * as gnuGrep from "./gnu-grep.js";
import * as pyscripts from "./pyscripts.js";
import type { RuntimeExec } from "./transport.js";
import { ActivityThrottle, intervalFor, parseSeconds } from "./activity.js";
import { SessionNotReady } from "./errors.js";
import { IdleAction, Phase, type AgentSession } from "./generated/contract.js";
import { raiseForTerminal, SessionStore, viewOf, type SessionSpecOptions, type SessionView, type WaitProgress } from "./sessions.js";
import { RuntimeTransport, type PodEndpoint, type ResponseLimits } from "./transport.js";
import { checkConnection, resolveEndpoint, type Connection } from "./endpoints.js";
import { checkPodIdentity, type PodIdentityMode } from "./identity.js";
import { normalize, PathPolicy, PathRefused, type ResolvedPath } from "./paths.js";

export { RUNTIME_PORT } from "./endpoints.js";
import { DEFAULT_COMMAND_TIMEOUT, DEFAULT_MAX_OUTPUT, FILE_ERRORS as FILE_ERROR_CODES, GREP_READ_MARGIN, MAX_COMMAND_TIMEOUT } from "./generated/protocol.js";
export { DEFAULT_COMMAND_TIMEOUT, DEFAULT_MAX_OUTPUT, MAX_COMMAND_TIMEOUT };

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
  /** Working directory of execute (default: the runtime's base directory, or rootDir in virtual mode). */
  workingDir?: string;
  /** Absolute prefixes where write/edit/delete/upload may act; elsewhere permission_denied. Reads are not limited. */
  allowPrefixes?: readonly string[];
  /** Caller paths are relative to `rootDir` in the pod; `..`, a leading `~` and symlinks out are invalid_path. */
  virtualMode?: boolean;
  rootDir?: string;
  /** How to reach the runtime (default: the status's pod IP); `{ mode: "router", url }` goes through the sandbox router. */
  connection?: Connection;
  /** "token" (default): before it is sent anything, the pod must show the identity token its template mounts
   * (the `agentsession-pod-identity` volume), signed by the cluster and naming the session's namespace and pod;
   * else UnverifiedPod. "address": trust the pod's name and addresses alone (a namesake at a reused IP is not
   * told apart). */
  podIdentity?: PodIdentityMode;
  /** Bounds on every answer of the pod (default 256 MiB, read timeout + 30 s). */
  responseLimits?: ResponseLimits;
  /** Default: in-cluster config, else $KUBECONFIG / ~/.kube/config. */
  kubeConfig?: k8s.KubeConfig;
  /** Called with a warning when an activity report fails (the operation itself goes on). */
  onWarning?: (message: string) => void;
  /** Called at each new step of a wait for Ready (the first operation's, a resume's, waitReady's): the phase,
   * the Ready condition's reason and message, the seconds waited. `describeProgress` prints one. */
  onProgress?: (step: WaitProgress) => void;
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

// Inside one public operation: BaseSandbox's read/glob call execute() (no second activity report), and
// `resolved` is a path already mapped to the pod (its downloadFiles must not map it again).
const operation = new AsyncLocalStorage<{ resolved?: ResolvedPath }>();

function refusalOf(err: unknown): PathRefused {
  if (err instanceof PathRefused) return err;
  throw err;
}

const GREP_READ_TIMEOUT = pyscripts.GREP_TIME_BUDGET + GREP_READ_MARGIN;
/** Seconds the request stopping a grep at its budget may take (it lists /proc and kills two processes). */
const STOP_READ_TIMEOUT = 10;

const FILE_ERRORS: ReadonlySet<string> = new Set<string>(FILE_ERROR_CODES);
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
  readonly policy: PathPolicy;
  /** Directory names grep skips (deepagents' default). */
  grepExcludeDirs: readonly string[] = [".git"];
  private readonly throttle: ActivityThrottle;
  private readonly cwd: string;

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
    this.policy = new PathPolicy({ virtualMode: options.virtualMode, rootDir: options.rootDir, allowPrefixes: options.allowPrefixes });
    this.cwd = options.workingDir ?? (this.policy.virtualMode ? this.policy.rootDir : "");
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
    new PathPolicy({ virtualMode: options.virtualMode, rootDir: options.rootDir, allowPrefixes: options.allowPrefixes }); // bad rules fail before a create
    checkConnection(options.connection);
    checkPodIdentity(options.podIdentity);
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
  waitReady(timeout?: number, onProgress?: (step: WaitProgress) => void): Promise<SessionView> {
    return this.store.waitReady(this.namespace, this.id, timeout ?? this.options.readyTimeout ?? 180, onProgress ?? this.options.onProgress);
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
    return resolveEndpoint(view, { connection: this.options.connection, podIdentity: this.options.podIdentity, kubeConfig: this.store.kubeConfig });
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

  /** Run `body` as one public operation: one activity report (busy window `busySeconds`), then `body`.
   * Only read and glob (BaseSandbox's, which call execute/downloadFiles) run inside the async context that
   * marks nested calls: entering it cost ~0.1 ms a call on a busy machine, which execute need not pay. */
  private async operate<T>(busySeconds: number | null, body: () => Promise<T>, resolved?: ResolvedPath): Promise<T> {
    const inside = operation.getStore() !== undefined;
    if (!inside) await this.reportActivity(busySeconds);
    if (resolved === undefined) return body();
    return operation.run({ resolved }, body);
  }

  /** Run `command` with `sh -c` in the pod; output is stdout+stderr in order. Never re-sent on a failure. */
  async execute(command: string, options: { timeout?: number } = {}): Promise<ExecuteResponse> {
    const timeout = checkTimeout(options.timeout ?? this.options.commandTimeout ?? DEFAULT_COMMAND_TIMEOUT);
    const result = await this.operate(timeout, () =>
      this.transport.execute(command, { timeout, maxOutput: this.options.maxOutputSize ?? DEFAULT_MAX_OUTPUT, cwd: this.cwd }),
    );
    return { output: result.output, exitCode: result.exitCode, truncated: result.truncated };
  }

  /** Write files of any size and bytes; parents are created, existing files overwritten. */
  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    const out: FileUploadResponse[] = files.map(([path]) => ({ path, error: null }));
    const items: Array<[string, Uint8Array, string]> = [];
    const positions: number[] = [];
    files.forEach(([path, content], i) => {
      try {
        const resolved = this.policy.resolve(path, true);
        items.push([resolved.real, content, resolved.confine]);
        positions.push(i);
      } catch (err) {
        out[i]!.error = refusalOf(err).code;
      }
    });
    await this.operate(null, async () => {
      if (items.length) (await this.transport.upload(items)).forEach((code, i) => (out[positions[i]!]!.error = asFileError(code)));
    });
    return out;
  }

  /** Read files byte-exact; errors: file_not_found, is_directory, permission_denied, invalid_path. */
  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    const out: FileDownloadResponse[] = paths.map((path) => ({ path, content: null, error: null }));
    const items: Array<[string, string]> = [];
    const positions: number[] = [];
    const already = operation.getStore()?.resolved; // BaseSandbox.read of a binary file: the pod path
    paths.forEach((path, i) => {
      try {
        const resolved = already && path === already.real ? already : this.policy.resolve(path);
        items.push([resolved.real, resolved.confine]);
        positions.push(i);
      } catch (err) {
        out[i]!.error = refusalOf(err).code;
      }
    });
    await this.operate(null, async () => {
      if (!items.length) return;
      (await this.transport.download(items)).forEach((r, i) => {
        out[positions[i]!]!.content = r.content;
        out[positions[i]!]!.error = asFileError(r.error);
      });
    });
    return out;
  }

  /** deepagents' write (a binary MIME type takes base64 content), within the path rules. */
  override async write(filePath: string, content: string): Promise<WriteResult> {
    try {
      this.policy.resolve(filePath, true);
    } catch (err) {
      const refusal = refusalOf(err);
      return { error: `Error: cannot write '${filePath}': ${refusal.code}: ${refusal.message}` };
    }
    return super.write(filePath, content);
  }

  /** List a directory in one python3 run: the Python client's scripts/ls.py. */
  override async ls(path: string): Promise<LsResult> {
    let resolved: ResolvedPath;
    try {
      resolved = this.policy.resolve(path);
    } catch (err) {
      return { error: `Path '${path}': ${refusalOf(err).code}` };
    }
    const raw = await this.operate(null, () => this.transport.run(() => this.transport.script(pyscripts.buildLs(resolved.real, resolved.confine), true), true));
    const answer = pyscripts.parseJsonLines(raw.stdout);
    if (answer.error !== null) return { error: `Path '${path}': ${answer.error}` };
    if (answer.done === null) return { error: `Path '${path}': ls failed in the sandbox: ${failure(raw)}` };
    const base = resolved.virtual.replace(/\/+$/, "");
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
    let resolved: ResolvedPath;
    try {
      resolved = this.policy.resolve(filePath, true);
    } catch (err) {
      const refusal = refusalOf(err);
      return { error: `Error: cannot edit '${filePath}': ${refusal.code}: ${refusal.message}` };
    }
    const payload = pyscripts.editPayload(resolved.real, oldString, newString, replaceAll, resolved.confine);
    const raw = await this.operate(null, async () => {
      if (Buffer.byteLength(payload) <= pyscripts.EDIT_INLINE_MAX) {
        return this.transport.run(() => this.transport.script(pyscripts.buildEdit(payload), false), false);
      }
      const staged = `/tmp/.lkc-edit-${crypto.randomUUID()}`; // edit.py removes it after reading
      const [up] = await this.transport.upload([[staged, Buffer.from(payload, "ascii"), ""]]);
      if (up) return { stdout: JSON.stringify({ error: "staging", detail: up }), stderr: "", exitCode: 1 };
      return this.transport.run(() => this.transport.script(pyscripts.buildEdit(staged), false), false);
    });
    return editResult(raw, filePath, oldString);
  }

  /** Remove a file or a directory tree (scripts/delete.sh: `rm -rf`), within allowPrefixes when set. */
  override async delete(filePath: string): Promise<DeleteResult> {
    let resolved: ResolvedPath;
    try {
      resolved = this.policy.resolve(filePath, true);
    } catch (err) {
      const refusal = refusalOf(err);
      return { error: `Error: cannot delete '${filePath}': ${refusal.code}: ${refusal.message}` };
    }
    if (resolved.virtual === "/" || (resolved.confine && normalize(resolved.real) === normalize(resolved.confine))) {
      return { error: `Error: refusing to delete the root '${filePath}'` };
    }
    const raw = await this.operate(null, () => this.transport.run(() => this.transport.script(scripts.buildDelete(resolved.real, resolved.confine), false), false));
    let answer: string;
    try {
      answer = scripts.parseMarker(raw.stdout, "@X");
    } catch {
      return { error: `Error deleting file '${filePath}': ${failure(raw)}` };
    }
    if (answer === "ok") return { path: filePath };
    if (answer === "file_not_found") return { error: `Error: '${filePath}' not found` };
    return { error: `Error deleting file '${filePath}': ${answer}` };
  }

  /** Literal search (GNU grep where the probe found it, else one python3 run: the Python client's
   * scripts), matches sorted by path, `truncated` when capped. No path: the directory commands run in. */
  override async grep(pattern: string, path?: string | null, glob?: string | null, maxCount?: number | null): Promise<GrepResult> {
    const max = maxCount ?? null;
    return this.operate(null, () =>
      this.transport.run(async (info) => {
        let where = path ?? undefined;
        if (where === undefined && !this.policy.virtualMode) where = this.cwd || info.baseDir;
        let root: ResolvedPath;
        try {
          root = this.policy.resolveDir(where);
        } catch (err) {
          return { error: `Path '${where}': ${refusalOf(err).code}` };
        }
        if (info.gnuGrep && gnuGrep.gnuGrepFits(root.real, this.grepExcludeDirs, glob, root.confine)) {
          const cap = max !== null ? max + 1 : pyscripts.GREP_MATCH_LIMIT + 1;
          const tag = gnuGrep.newTag();
          const gnu = gnuGrep.buildGnuGrep(pattern.split("\n").filter(Boolean).length ? pattern.split("\n").filter(Boolean) : [pattern], root.real, {
            excludeDirs: this.grepExcludeDirs,
            cap,
            tag,
          });
          const [raw, stopped] = await this.search(gnu, tag);
          const found = this.gnuGrepResult(raw, cap, max, stopped);
          if (found !== null) return found;
          // grep failed with nothing found (a missing or unreadable path): grep.py says exactly what happened.
        }
        let command: string;
        try {
          command = pyscripts.buildGrep(pattern, root.real, glob, { maxCount: max, excludeDirs: this.grepExcludeDirs, confine: root.confine });
        } catch (err) {
          return { error: `Error: ${(err as Error).message}` };
        }
        return this.grepResult(await this.transport.script(command, true, GREP_READ_TIMEOUT), path ?? undefined, max);
      }, true),
    );
  }

  /** A GNU grep search under its time budget: the client keeps the time and, at the budget, stops the search
   * by its tag and keeps what it found (no watchdog process in the pod). The search, and whether it was stopped. */
  private async search(command: string, tag: string): Promise<[RuntimeExec, boolean]> {
    let stopped = false;
    const alarm = setTimeout(() => {
      stopped = true;
      // The search's own answer (or its read timeout) still comes if the stop fails.
      this.transport.script(gnuGrep.buildStopSearch(tag), false, STOP_READ_TIMEOUT).catch(() => undefined);
    }, pyscripts.GREP_TIME_BUDGET * 1000);
    try {
      return [await this.transport.script(command, true, GREP_READ_TIMEOUT), stopped];
    } finally {
      clearTimeout(alarm);
    }
  }

  private gnuGrepResult(raw: RuntimeExec, cap: number, max: number | null, stopped: boolean): GrepResult | null {
    const killed = gnuGrep.GREP_KILLED.has(raw.exitCode) || (stopped && raw.exitCode === 0);
    if (!(raw.exitCode === 0 || killed) || !(raw.stdout.startsWith("/") || !raw.stdout)) return null;
    const rows = gnuGrep.gnuGrepRows(raw.stdout) ?? gnuGrep.gnuGrepRowsSlowly(raw.stdout);
    if (!rows.length && raw.stderr.trim() && !killed) return null;
    let matches: GrepMatch[] = rows.slice(0, cap).map(([p, line, text]) => ({ path: this.policy.display(p), line, text }));
    let truncated = rows.length >= cap || killed;
    if (max !== null && matches.length > max) [matches, truncated] = [matches.slice(0, max), true];
    return { matches, truncated };
  }

  private grepResult(raw: RuntimeExec, path: string | undefined, max: number | null): GrepResult {
    const shown = path || ".";
    const answer = pyscripts.parseJsonLines(raw.stdout);
    if (answer.error !== null) return { error: `Path '${shown}': ${answer.error}` };
    if (answer.done === null) return { error: `Path '${shown}': grep failed in the sandbox: ${failure(raw)}` };
    const found: gnuGrep.GrepRow[] = [];
    for (const rec of answer.records) {
      if (typeof rec.p === "string" && Number.isInteger(rec.l) && typeof rec.t === "string") found.push([rec.p, rec.l as number, rec.t]);
    }
    found.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    let matches: GrepMatch[] = found.map(([p, line, text]) => ({ path: this.policy.display(p), line, text }));
    let truncated = Boolean(answer.done.trunc);
    if (max !== null && matches.length > max) [matches, truncated] = [matches.slice(0, max), true];
    return { matches, truncated };
  }

  /** Before deepagents' own scripts (read, glob): a symlink out of the confinement root is refused. */
  private async confineRefusal(resolved: ResolvedPath): Promise<string | null> {
    if (!resolved.confine) return null;
    const raw = await this.transport.run(() => this.transport.script(scripts.buildConfineCheck(resolved.real, resolved.confine), true), true);
    const answer = scripts.parseMarker(raw.stdout, "@C");
    return answer === "ok" ? null : answer;
  }

  /** deepagents' glob (paths relative to `path`), with virtual paths mapped and confined. */
  override async glob(pattern: string, path = "/"): Promise<GlobResult> {
    let root: ResolvedPath;
    try {
      root = this.policy.resolveDir(path);
    } catch (err) {
      return { error: `Path '${path}': ${refusalOf(err).code}` };
    }
    return this.operate(null, async () => {
      const refusal = await this.confineRefusal(root);
      if (refusal) return { error: `Path '${path}': ${refusal}` };
      const result = await super.glob(pattern, this.policy.virtualMode ? root.real : path);
      if (!this.policy.virtualMode) return result;
      if (result.error !== undefined) result.error = result.error.replaceAll(root.real, root.virtual);
      if (result.files) {
        result.files = result.files.flatMap((info) => {
          if (!info.path.startsWith("/")) return [info];
          const virtual = this.policy.toVirtual(info.path);
          return virtual === null ? [] : [{ ...info, path: virtual }];
        });
      }
      return result;
    }, root);
  }

  /** deepagents' paginated read, with virtual paths mapped and confined. */
  override async read(filePath: string, offset = 0, limit = 500): Promise<ReadResult> {
    let resolved: ResolvedPath;
    try {
      resolved = this.policy.resolve(filePath);
    } catch (err) {
      return { error: `File '${filePath}': ${refusalOf(err).code}` };
    }
    return this.operate(null, async () => {
      const refusal = await this.confineRefusal(resolved);
      if (refusal) return { error: `File '${filePath}': ${refusal}` };
      const result = await super.read(this.policy.virtualMode ? resolved.real : filePath, offset, limit);
      if (result.error !== undefined && resolved.real !== resolved.virtual) result.error = result.error.replaceAll(resolved.real, filePath);
      return result;
    }, resolved);
  }

  /** Probe the runtime now; WrongPod when it is not the pod the status names (UnverifiedPod: not by its token). */
  async checkIdentity() {
    await this.transport.run(async () => undefined, true);
    return this.transport.checkIdentity();
  }

  /** A new AgentSession `name` whose volumes start as copies of this session's, and its backend.
   * The storage layer copies the volumes (a PVC clone); the two share nothing afterwards. A Ready source is
   * copied crash-consistently; `suspendSource: true` suspends it for the moment of the copy (until the fork
   * is Ready) and resumes it after, for an exact copy. `options` are the fork's (volumes cannot be given). */
  fork(name: string, options: ForkOptions = {}): Promise<AgentSessionSandbox> {
    return forkSession(this.id, name, {
      namespace: this.namespace,
      connection: this.options.connection,
      podIdentity: this.options.podIdentity,
      readyTimeout: this.options.readyTimeout,
      kubeConfig: this.store.kubeConfig,
      ...options,
    });
  }

  /** Delete the AgentSession (only this one: the UID is a precondition). */
  deleteSession(): Promise<boolean> {
    return this.store.delete(this.namespace, this.id, this.uid);
  }

  close(): void {
    this.transport.close();
  }
}

export interface ForkOptions extends Omit<AgentSessionSandboxOptions, "forkFrom"> {
  suspendSource?: boolean;
}

/** Create `name` as a fork of `source` (spec.forkFrom; see AgentSessionSandbox.fork) and return its backend. */
export async function forkSession(source: string, name: string, options: ForkOptions = {}): Promise<AgentSessionSandbox> {
  const { suspendSource = false, ...rest } = options;
  if (rest.volumeClaimTemplates?.length) throw new RangeError("a fork's volumes are copies of the source's: volumeClaimTemplates cannot be given");
  delete rest.volumeClaimTemplates;
  const namespace = rest.namespace ?? "default";
  const store = new SessionStore(rest.kubeConfig);
  const body = await store.require(namespace, source);
  const timeout = rest.readyTimeout ?? 180;
  // A source already suspended (by its owner, or idle) stays so: only what this call suspended is resumed.
  const already = Boolean(body.spec?.suspend) || body.status?.phase === Phase.SUSPENDED;
  const ours = suspendSource && !already;
  if (ours) await store.setSuspend(namespace, source, true);
  try {
    if (suspendSource) await store.waitPhase(namespace, source, Phase.SUSPENDED, timeout, 0.5, options.onProgress);
    const forked = await AgentSessionSandbox.create(name, { ...rest, kubeConfig: store.kubeConfig, forkFrom: source });
    if (suspendSource) await forked.waitReady(); // Ready means its volumes are bound: the copy is made
    return forked;
  } finally {
    if (ours) await store.setSuspend(namespace, source, false);
  }
}
