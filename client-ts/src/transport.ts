// HTTP to one pod's python runtime (GET /, POST /execute, POST /upload, GET /download/<path>), keep-alive,
// every answer bounded in size and total time, and the reconnection rule of langchain_k8s_client.transport:
// idempotent requests are retried; a command or write is never sent twice, except when it provably never
// left (connection refused: the pod was suspended or replaced), and then to the endpoint the session names now.
import { randomUUID } from "node:crypto";
import http from "node:http";
import https from "node:https";
import { MalformedResponse, ResponseTooLarge, ResponseTooSlow, SandboxError, TransportError, WrongPod } from "./errors.js";
import type { PodIdentity } from "./identity.js";
import * as scripts from "./scripts.js";
import * as probe from "./probe.js";
import type { CommandResult } from "./scripts.js";
import type { RuntimeInfo } from "./probe.js";
import {
  ACCEPT_ENCODING_HEADER,
  CAPTURE_SWEEP_EVERY,
  CONNECT_TIMEOUT,
  CONTENT_ENCODING_HEADER,
  CONTENT_LENGTH_HEADER,
  CONTENT_TYPE_HEADER,
  CONTROL_READ_TIMEOUT,
  DEFAULT_MAX_RESPONSE_BYTES,
  DEFAULT_SLACK_SECONDS,
  DOWNLOAD_INLINE_BUDGET,
  DOWNLOAD_INLINE_MAX,
  DOWNLOAD_PATH,
  EXECUTE_COMMAND,
  EXECUTE_EXIT_CODE,
  EXECUTE_PATH,
  EXECUTE_READ_MARGIN,
  EXECUTE_STDERR,
  EXECUTE_STDOUT,
  FILE_NOT_FOUND,
  GATEWAY_STATUSES,
  HEADER_LIST_SEPARATOR,
  HEADER_WHITESPACE,
  IDENTITY,
  JSON_CONTENT_TYPE,
  READABLE_CONTENT_CODINGS,
  RETRY_ATTEMPTS,
  RETRY_BASE_DELAY,
  RETRY_JITTER,
  RETRY_MAX_DELAY,
  STATUS_NOT_FOUND,
  STATUS_OK,
  TRANSFER_READ_TIMEOUT,
  UPLOAD_CONTENT_TYPE,
  UPLOAD_FIELD,
  UPLOAD_PATH,
} from "./generated/protocol.js";

export { CAPTURE_SWEEP_EVERY, CONNECT_TIMEOUT, CONTROL_READ_TIMEOUT, DOWNLOAD_INLINE_BUDGET, DOWNLOAD_INLINE_MAX, EXECUTE_READ_MARGIN, TRANSFER_READ_TIMEOUT };

export interface PodEndpoint {
  /** e.g. `http://10.0.3.7:8888` (the status's pod IP). */
  baseUrl: string;
  headers?: Record<string, string>;
  /** The pod's name: the runtime's hostname is checked against it on every (re)connection. */
  expectedHostname?: string;
  /** The pod's IPs as the API has them (the session's status.podIPs): the pod reached must hold one of them
   * (names are unique only within a namespace, IPs in the cluster). */
  expectedIPs?: readonly string[];
  /** The identity token the pod must show before it is sent anything (`podIdentity: "token"`, identity.ts);
   * absent: its name and addresses alone are checked. */
  identity?: PodIdentity;
  /** Router mode with the operator's issuer: each request carries its own token (router-credentials.ts). */
  credentials?: { grant(method: string, path: string): Promise<{ token: string }> };
}

/** Bounds on one answer of the pod: bytes, and in total the request's read timeout plus `slackSeconds`. */
export interface ResponseLimits {
  maxBytes: number;
  slackSeconds: number;
}
export const DEFAULT_LIMITS: ResponseLimits = { maxBytes: DEFAULT_MAX_RESPONSE_BYTES, slackSeconds: DEFAULT_SLACK_SECONDS };

interface HttpRequest {
  method: "GET" | "POST";
  path: string;
  readTimeout: number;
  idempotent: boolean;
  json?: string;
  upload?: { name: string; content: Uint8Array };
}

interface HttpResponse {
  status: number;
  content: Buffer;
}

export interface RuntimeExec {
  stdout: string;
  stderr: string;
  exitCode: number;
}

export interface Downloaded {
  content: Uint8Array | null;
  error: string | null;
}

const NOT_SENT = new Set(["ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "EADDRNOTAVAIL", "ECONNECT_TIMEOUT"]);
const RETRY_STATUS: ReadonlySet<number> = new Set<number>(GATEWAY_STATUSES);

/** Whether an answer whose Content-Encoding is `header` (Node joins repeated lines with ", ") may be read:
 * every list element, stripped of optional whitespace and compared case-insensitively (ASCII), is empty or
 * one of READABLE_CONTENT_CODINGS; no header: read. The rule of langchain_k8s_client.protocol
 * (content_codings_readable), data and all, so a pod's bytes are never decoded by either client. */
export function contentCodingsReadable(header: string | readonly string[] | undefined): boolean {
  const lines = header === undefined ? [] : typeof header === "string" ? [header] : header;
  const readable: readonly string[] = READABLE_CONTENT_CODINGS;
  for (const line of lines) {
    for (const element of line.split(HEADER_LIST_SEPARATOR)) {
      const token = stripChars(element, HEADER_WHITESPACE);
      if (token && !(/^[\x00-\x7f]*$/.test(token) && readable.includes(token.replace(/[A-Z]/g, (c) => c.toLowerCase())))) return false;
    }
  }
  return true;
}

function stripChars(text: string, chars: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && chars.includes(text[start]!)) start++;
  while (end > start && chars.includes(text[end - 1]!)) end--;
  return text.slice(start, end);
}

/** The wait before retry `retry` (0-based), as langchain_k8s_client.transport.RetryPolicy.delay. */
export function retryDelay(retry: number, random: () => number = Math.random): number {
  const [low, high] = RETRY_JITTER;
  return Math.min(RETRY_MAX_DELAY, RETRY_BASE_DELAY * 2 ** retry) * (low + random() * (high - low));
}

/** JSON with every non-ASCII character escaped (Python's ensure_ascii), as the Python client sends it. */
export function asciiJson(value: unknown): string {
  return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

export class RuntimeTransport {
  info: RuntimeInfo | null = null;
  private endpoint: PodEndpoint;
  private stale = false;
  private readonly agent: http.Agent;
  private readonly capture = `o.${randomUUID().replaceAll("-", "").slice(0, 12)}`;
  private commands = 0;
  private staged = new Set<string>();
  private stagingFails = false;

  constructor(
    endpoint: PodEndpoint,
    private readonly options: { resolveEndpoint?: () => Promise<PodEndpoint>; limits?: ResponseLimits } = {},
  ) {
    this.endpoint = endpoint;
    this.agent = new (endpoint.baseUrl.startsWith("https:") ? https.Agent : http.Agent)({ keepAlive: true, maxSockets: 8 });
  }

  get currentEndpoint(): PodEndpoint {
    return this.endpoint;
  }

  /** The next operation asks where the pod is now and probes it again. */
  markStale(): void {
    this.stale = true;
    this.info = null;
  }

  setEndpoint(endpoint: PodEndpoint): void {
    if (endpoint.baseUrl !== this.endpoint.baseUrl) this.agent.destroy();
    this.endpoint = endpoint;
    this.stale = false;
    this.info = null;
  }

  close(): void {
    this.agent.destroy();
  }

  // ---- one request, bounded
  private async sendOnce(req: HttpRequest): Promise<HttpResponse> {
    const credentials = this.endpoint.credentials;
    const token = credentials ? (await credentials.grant(req.method, req.path)).token : undefined;
    return this.sendWith(req, token);
  }

  private sendWith(req: HttpRequest, token: string | undefined): Promise<HttpResponse> {
    const limits = this.options.limits ?? DEFAULT_LIMITS;
    const url = new URL(this.endpoint.baseUrl.replace(/\/+$/, "") + req.path);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(this.endpoint.headers ?? {})) if (k.toLowerCase() !== ACCEPT_ENCODING_HEADER.toLowerCase()) headers[k] = v;
    if (token !== undefined) headers["Authorization"] = `Bearer ${token}`;
    headers[ACCEPT_ENCODING_HEADER] = IDENTITY;
    let body: Buffer | undefined;
    if (req.json !== undefined) {
      body = Buffer.from(req.json, "ascii");
      headers[CONTENT_TYPE_HEADER] = JSON_CONTENT_TYPE;
    } else if (req.upload) {
      const boundary = randomUUID().replaceAll("-", "");
      const head = `--${boundary}\r\nContent-Disposition: form-data; name="${UPLOAD_FIELD}"; filename="${req.upload.name}"\r\n${CONTENT_TYPE_HEADER}: ${UPLOAD_CONTENT_TYPE}\r\n\r\n`;
      body = Buffer.concat([Buffer.from(head), Buffer.from(req.upload.content), Buffer.from(`\r\n--${boundary}--\r\n`)]);
      headers[CONTENT_TYPE_HEADER] = `multipart/form-data; boundary=${boundary}`;
    }
    if (body) headers[CONTENT_LENGTH_HEADER] = String(body.length);
    const lib = url.protocol === "https:" ? https : http;
    return new Promise<HttpResponse>((resolve, reject) => {
      let settled = false;
      let connected = false;
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        clearTimeout(connectTimer);
        request.destroy();
        reject(err);
      };
      const request = lib.request(url, { method: req.method, headers, agent: this.agent });
      const total = req.readTimeout + limits.slackSeconds;
      const deadline = setTimeout(
        () => fail(new ResponseTooSlow(`the runtime's answer took longer than ${total} s in total`, "slack_seconds", limits.slackSeconds)),
        total * 1000,
      );
      const connectTimer = setTimeout(() => {
        if (!connected) fail(Object.assign(new Error(`connect timed out after ${CONNECT_TIMEOUT} s`), { code: "ECONNECT_TIMEOUT" }));
      }, CONNECT_TIMEOUT * 1000);
      request.on("socket", (socket) => {
        if (!socket.connecting) connected = true;
        else socket.once("connect", () => (connected = true));
      });
      request.on("error", (err: NodeJS.ErrnoException) => {
        const notSent = !connected && NOT_SENT.has(err.code ?? "");
        fail(new TransportError(`runtime at ${this.endpoint.baseUrl} unreachable: ${err.message}`, !notSent));
      });
      request.on("response", (res) => {
        const encoding = res.headers[CONTENT_ENCODING_HEADER.toLowerCase()];
        if (!contentCodingsReadable(encoding)) {
          const named = JSON.stringify(String(encoding).slice(0, 100));
          return fail(new MalformedResponse(`the runtime's answer to ${req.method} ${req.path.slice(0, 120)} came with ${CONTENT_ENCODING_HEADER} ${named}: this client asks for ${ACCEPT_ENCODING_HEADER}: ${IDENTITY} and reads no other coding`));
        }
        const length = Number(res.headers[CONTENT_LENGTH_HEADER.toLowerCase()] ?? "0");
        const tooLarge = () => new ResponseTooLarge(`the runtime's answer exceeds ${limits.maxBytes} bytes`, "max_bytes", limits.maxBytes);
        if (length > limits.maxBytes) return fail(tooLarge());
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > limits.maxBytes) fail(tooLarge());
          else chunks.push(chunk);
        });
        res.on("error", (err) => fail(new TransportError(`reading the runtime's answer failed: ${err.message}`)));
        res.on("end", () => {
          if (settled) return;
          settled = true;
          clearTimeout(deadline);
          clearTimeout(connectTimer);
          resolve({ status: res.statusCode ?? 0, content: Buffer.concat(chunks) });
        });
      });
      request.end(body);
    });
  }

  private async send(req: HttpRequest): Promise<HttpResponse> {
    const attempts = req.idempotent ? RETRY_ATTEMPTS : 1;
    for (let attempt = 1; ; attempt++) {
      try {
        const resp = await this.sendOnce(req);
        if (!RETRY_STATUS.has(resp.status)) return resp;
        // A gateway (the router) answered for the pod: retried when idempotent, else the pod is unreachable.
        if (attempt >= attempts) throw new TransportError(`${req.method} ${req.path}: gateway answered HTTP ${resp.status}`);
      } catch (err) {
        // A command or write that may have been delivered is never sent again.
        if (!(err instanceof TransportError) || attempt >= attempts) throw err;
      }
      await new Promise((r) => setTimeout(r, retryDelay(attempt - 1) * 1000));
    }
  }

  // ---- the reconnection rule
  private async resolve(): Promise<void> {
    this.setEndpoint(await this.options.resolveEndpoint!());
  }

  private async connect(): Promise<RuntimeInfo> {
    if (this.stale && this.options.resolveEndpoint) await this.resolve();
    if (this.info) return this.info;
    try {
      return await this.probe();
    } catch (err) {
      if (!this.options.resolveEndpoint || !(err instanceof TransportError || err instanceof WrongPod)) throw err;
      await this.resolve();
      return await this.probe();
    }
  }

  async run<T>(op: (info: RuntimeInfo) => Promise<T>, idempotent: boolean): Promise<T> {
    try {
      return await op(await this.connect());
    } catch (err) {
      if (!(err instanceof TransportError)) throw err;
      if (!(this.options.resolveEndpoint && (idempotent || !err.maybeDelivered))) {
        this.afterFailure();
        throw err;
      }
    }
    await this.resolve();
    try {
      return await op(await this.connect());
    } catch (err) {
      if (err instanceof TransportError) this.afterFailure();
      throw err;
    }
  }

  private afterFailure(): void {
    if (this.options.resolveEndpoint) this.stale = true;
    this.info = null;
  }

  // ---- the runtime's operations
  async script(command: string, idempotent: boolean, readTimeout = CONTROL_READ_TIMEOUT): Promise<RuntimeExec> {
    const resp = await this.send({ method: "POST", path: EXECUTE_PATH, readTimeout, idempotent, json: asciiJson({ [EXECUTE_COMMAND]: command }) });
    if (resp.status !== STATUS_OK) throw new MalformedResponse(`runtime ${EXECUTE_PATH} answered HTTP ${resp.status}: ${resp.content.subarray(0, 200)}`);
    let data: unknown;
    try {
      data = JSON.parse(resp.content.toString("utf-8"));
    } catch {
      throw new MalformedResponse(`runtime ${EXECUTE_PATH} answered garbage: ${resp.content.subarray(0, 200)}`);
    }
    const d = data as Record<string, unknown>;
    const stdout = d?.[EXECUTE_STDOUT];
    const stderr = d?.[EXECUTE_STDERR];
    const exitCode = d?.[EXECUTE_EXIT_CODE];
    if (typeof d !== "object" || d === null || Array.isArray(d) || typeof stdout !== "string" || typeof stderr !== "string" || !Number.isInteger(exitCode)) {
      throw new MalformedResponse(`runtime ${EXECUTE_PATH} answered garbage: ${resp.content.subarray(0, 200)}`);
    }
    return { stdout, stderr, exitCode: exitCode as number };
  }

  private async uploadRaw(name: string, content: Uint8Array): Promise<string | null> {
    const resp = await this.send({ method: "POST", path: UPLOAD_PATH, readTimeout: TRANSFER_READ_TIMEOUT, idempotent: false, upload: { name, content } });
    return resp.status === STATUS_OK ? null : `staging upload failed: HTTP ${resp.status} ${resp.content.subarray(0, 120)}`;
  }

  /** Probe the runtime and check it is the pod the session names (WrongPod otherwise; UnverifiedPod when it
   * cannot prove it with its identity token). Nothing else is sent to a pod before this passes. */
  async probe(): Promise<RuntimeInfo> {
    this.info = null;
    const raw = await this.script(probe.buildProbe(), true);
    const info = probe.parseProbe(raw.stdout);
    this.endpoint.identity?.check(info.identityToken);
    const expected = this.endpoint.expectedHostname;
    const ips = this.endpoint.expectedIPs ?? [];
    if (expected && info.hostname !== expected) throw new WrongPod(expected, info.hostname, ips, info.addresses);
    // A name is unique only within a namespace: the pod must also hold an IP the API gave the session's pod,
    // judged in the address families its kernel shows (none shown: judged by its name alone).
    const judged = ips.filter((ip) => probe.showsFamilyOf(info, ip));
    if (judged.length && !judged.some((ip) => probe.holds(info, ip))) throw new WrongPod(expected ?? "", info.hostname, ips, info.addresses);
    this.info = info;
    this.staged = new Set(info.wrappers);
    return info;
  }

  async checkIdentity(): Promise<RuntimeInfo> {
    this.info = null;
    return this.connect();
  }

  execute(command: string, o: { timeout: number; maxOutput: number; cwd: string }): Promise<CommandResult> {
    return this.run(async (info) => {
      const runner = probe.runnerFor(info, o.timeout);
      this.commands += 1;
      const wrapped = scripts.userCommand(command, {
        timeout: o.timeout,
        maxOutput: o.maxOutput,
        stagingDir: probe.stagingDir(info),
        cwd: o.cwd,
        runner,
        hasBase64: info.hasBase64,
        capture: this.capture,
        seq: this.commands,
        sweep: this.commands % CAPTURE_SWEEP_EVERY === 1 ? CAPTURE_SWEEP_EVERY : 0,
      });
      const readTimeout = o.timeout + EXECUTE_READ_MARGIN;
      let raw: RuntimeExec | null = null;
      for (let i = 0; i < 2; i++) {
        if (!(await this.stageWrapper(info, wrapped))) break;
        raw = await this.script(wrapped.staged(), false, readTimeout);
        if (!scripts.wrapperMissing(raw.stdout, raw.stderr, raw.exitCode, wrapped.wrapper)) break;
        this.staged.delete(wrapped.wrapper); // removed since the probe saw it: nothing ran
        raw = null;
      }
      raw ??= await this.script(wrapped.inline(), false, readTimeout);
      return scripts.parseUserCommand(raw.stdout, raw.stderr, raw.exitCode, { timeout: o.timeout, maxOutput: o.maxOutput, runner });
    }, false);
  }

  private async stageWrapper(info: RuntimeInfo, wrapped: scripts.UserCommand): Promise<boolean> {
    if (this.staged.has(wrapped.wrapper)) return true;
    if (this.stagingFails || !info.stagesWrappers) return false;
    const temporary = `${wrapped.wrapper}.${randomUUID().replaceAll("-", "")}`;
    if ((await this.uploadRaw(`${probe.STAGING_DIRNAME}/${temporary}`, Buffer.from(wrapped.script, "utf-8"))) === null) {
      const staging = probe.stagingDir(info);
      const raw = await this.script(scripts.buildStageWrapper(`${staging}/${temporary}`, `${staging}/${wrapped.wrapper}`), false);
      if (raw.exitCode === 0) {
        this.staged.add(wrapped.wrapper);
        return true;
      }
    }
    this.stagingFails = true;
    return false;
  }

  /** Write files: (absolute target, content, confinement root or ""); null per success. */
  upload(items: ReadonlyArray<[string, Uint8Array, string]>): Promise<Array<string | null>> {
    return this.run(async (info) => {
      const results: Array<string | null> = items.map(() => null);
      const token = randomUUID().replaceAll("-", "");
      const staged: Array<[string, string, string]> = [];
      const positions: number[] = [];
      for (const [index, [target, content, confine]] of items.entries()) {
        const name = `up-${token}-${index}`;
        const error = await this.uploadRaw(`${probe.STAGING_DIRNAME}/${name}`, content);
        if (error !== null) {
          results[index] = error;
          continue;
        }
        staged.push([`${probe.stagingDir(info)}/${name}`, target, confine]);
        positions.push(index);
      }
      if (staged.length) {
        const raw = await this.script(scripts.buildUploadFinalize(staged), false);
        scripts.parseUploadFinalize(raw.stdout, staged.length).forEach((code, i) => (results[positions[i]!] = code));
      }
      return results;
    }, false);
  }

  /** Read files: (absolute path, confinement root or ""). */
  download(items: ReadonlyArray<[string, string]>): Promise<Downloaded[]> {
    return this.run(async (info) => {
      const staging = probe.stagingDir(info);
      const prep = scripts.buildDownloadPrepare(items, {
        stagingDir: staging,
        token: randomUUID().replaceAll("-", ""),
        inlineMax: DOWNLOAD_INLINE_MAX,
        inlineBudget: DOWNLOAD_INLINE_BUDGET,
      });
      const raw = await this.script(prep, true, TRANSFER_READ_TIMEOUT);
      const preps = scripts.parseDownloadPrepare(raw.stdout, items.length);
      const stagedFiles = preps.filter((p) => p.staged !== undefined).map((p) => `${staging}/${p.staged}`);
      try {
        const results: Downloaded[] = [];
        for (const p of preps) {
          if (p.staged === undefined) {
            results.push({ content: p.content ?? null, error: p.error ?? null });
            continue;
          }
          const path = DOWNLOAD_PATH + encodeURIComponent(`${probe.STAGING_DIRNAME}/${p.staged}`).replaceAll("%2F", "/");
          const resp = await this.send({ method: "GET", path, readTimeout: TRANSFER_READ_TIMEOUT, idempotent: true });
          if (resp.status === STATUS_OK) results.push({ content: new Uint8Array(resp.content), error: null });
          else if (resp.status === STATUS_NOT_FOUND) results.push({ content: null, error: FILE_NOT_FOUND });
          else throw new SandboxError(`runtime /download answered HTTP ${resp.status}`);
        }
        return results;
      } finally {
        if (stagedFiles.length) await this.script(scripts.buildRemove(stagedFiles), true).catch(() => undefined);
      }
    }, true);
  }
}
