// The in-pod scripts, read from the files the Python client ships (copied into this package at build
// time by tools/copy-scripts.mjs), and the commands built from them: the same bytes as
// langchain_k8s_client.commands / pyscripts send (tests/unit/client/test_ts_scripts.py compares them).
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import * as addresses from "./addresses.js";
import { MalformedResponse } from "./errors.js";
import { POD_IDENTITY_TOKEN_PATH } from "./generated/contract.js";

const SCRIPTS_DIR = new URL("../../scripts/", import.meta.url);
const SH_INCLUDE = /^\s*\. \.\/([a-z_]+\.sh)\s*$/;
const PY_INCLUDE = /^#: include ([a-z_]+\.py)$/;

function scriptLines(name: string): string[] {
  const lines = readFileSync(new URL(name, SCRIPTS_DIR), "utf-8").split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/** commands.load_script: comment lines and indentation dropped, `. ./other.sh` lines inlined. */
export function loadScript(name: string): string {
  const lines: string[] = [];
  for (const line of scriptLines(name)) {
    const include = SH_INCLUDE.exec(line);
    if (include) lines.push(loadScript(include[1]!));
    else if (!line.trimStart().startsWith("#")) lines.push(line.trimStart());
  }
  return lines.join("\n");
}

/** pyscripts.load_pyscript: whole-line comments dropped, `#: include x.py` lines inlined. */
export function loadPyScript(name: string): string {
  let out = "";
  for (const line of scriptLines(name)) {
    const include = PY_INCLUDE.exec(line);
    if (include) out += loadPyScript(include[1]!);
    else if (!line.trimStart().startsWith("#")) out += line + "\n";
  }
  return out;
}

const UNSAFE = /[^\w@%+=:,./-]/;

/** Python's shlex.quote. */
export function shellQuote(word: string): string {
  if (word === "") return "''";
  if (!UNSAFE.test(word)) return word;
  return "'" + word.replaceAll("'", `'"'"'`) + "'";
}

/** shlex.join: the runtime shlex-splits the command back into exactly these words. */
export function runtimeCommand(argv: readonly string[]): string {
  return argv.map(shellQuote).join(" ");
}

export function shCommand(script: string, ...args: string[]): string {
  return runtimeCommand(["sh", "-c", script, "lkc", ...args]);
}

// ---- constants shared with commands.py / runtime.py (the values the protocol fixes)
export const STAGING_DIRNAME = ".lkc-staging";
export const RUNTIME_TIMEOUT_EXIT = 124;
export const RUNTIME_DEFAULT_LIMIT = 300;
export const WRAPPER_PREFIX = "w-";

export type Runner = "timeout" | "python3" | "none";

// ---- probe
export interface RuntimeInfo {
  baseDir: string;
  hostname: string;
  runner: Runner;
  hasBase64: boolean;
  execLimit: number | null;
  /** GNU grep is there: grep() uses it (buildGnuGrep). */
  gnuGrep: boolean;
  wrappers: Set<string>;
  stagesWrappers: boolean;
  /** The pod's own addresses, as networks (`10.244.1.17/32`, a shared loopback range `127.0.0.0/8`); empty
   * when its kernel shows none (the identity check then rests on the pod name). */
  addresses: string[];
  /** The pod's identity token (identity.ts), "" when the pod has none. */
  identityToken: string;
}

/** `ip` is one of the pod's own addresses. */
export function holds(info: RuntimeInfo, ip: string): boolean {
  return addresses.holds(info.addresses, ip);
}

/** The pod showed addresses of `ip`'s family (gVisor's kernel has no fib_trie: no IPv4 list). */
export function showsFamilyOf(info: RuntimeInfo, ip: string): boolean {
  return addresses.showsFamilyOf(info.addresses, ip);
}

export function stagingDir(info: RuntimeInfo): string {
  return `${info.baseDir.replace(/\/+$/, "")}/${STAGING_DIRNAME}`;
}

export function runnerFor(info: RuntimeInfo, timeout: number): Runner {
  return info.execLimit !== null && timeout >= info.execLimit ? "none" : info.runner;
}

let probeScript: string | undefined;
export function buildProbe(): string {
  probeScript ??= loadScript("probe.sh");
  return shCommand(probeScript, STAGING_DIRNAME, POD_IDENTITY_TOKEN_PATH);
}

export function parseProbe(stdout: string): RuntimeInfo {
  const lines = stdout.split(/\r\n|\r|\n/);
  if (lines[0] !== "@LKCP") throw new MalformedResponse(`unexpected probe output from the runtime: ${stdout.slice(0, 200)}`);
  const fields = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const at = line.indexOf("=");
    if (at >= 0) fields.set(line.slice(0, at), line.slice(at + 1));
  }
  const base = fields.get("base") ?? "";
  if (!base.startsWith("/")) throw new MalformedResponse(`runtime reported no usable base directory: ${base}`);
  const runner = fields.get("runner");
  return {
    baseDir: base,
    hostname: fields.get("host") ?? "",
    runner: runner === "timeout" || runner === "python3" ? runner : "none",
    hasBase64: fields.get("base64") === "1",
    gnuGrep: fields.get("grep") === "gnu",
    execLimit: fields.get("group") === "1" ? execLimit(fields.get("limit")) : null,
    wrappers: new Set((fields.get("wrappers") ?? "").split(/\s+/).filter(Boolean)),
    stagesWrappers: fields.get("sh") === "dash",
    addresses: addresses.probeAddresses(fields.get("v4") ?? "", fields.get("v6") ?? ""),
    identityToken: fields.get("idtoken") ?? "",
  };
}

function execLimit(raw: string | undefined): number | null {
  if (raw === undefined || raw === "?") return null;
  const value = /^\s*[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?\s*$/i.test(raw) ? Number(raw) : NaN;
  if (Number.isNaN(value) && !/^\s*[-+]?(inf|infinity|nan)\s*$/i.test(raw)) return RUNTIME_DEFAULT_LIMIT;
  return Number.isFinite(value) && value > 0 ? value : RUNTIME_DEFAULT_LIMIT;
}

// ---- the user-command wrapper (commands.user_command)
const SUBSHELL = '( eval "set --;$4" )';
const OWN_SHELL = '(exec sh -c "$4")';
const IN_PLACE = 'eval "$4"';
const OWN_SHELL_WORDS = ["$$", "{$", "PPID", "LINENO"];
const PLAIN_WORDS = /^[A-Za-z0-9_./:,+@%^*?[\] -]+$/;
// prettier-ignore
const NOT_IN_PLACE = new Set([
  "break", ":", "continue", ".", "eval", "exec", "exit", "export", "readonly", "return", "set", "shift", "times",
  "trap", "unset", "alias", "unalias", "read", "getopts", "wait", "umask", "ulimit", "hash", "command", "builtin",
  "local", "kill", "fg", "bg", "jobs", "type", "if", "then", "else", "elif", "fi", "do", "done", "case", "esac",
  "while", "until", "for", "in", "function", "select", "time", "{", "}", "!", "[[", "]]", "",
]);
const PY_BASE64 =
  "python3 -S -c 'import base64,sys;sys.stdout.write(base64.b64encode(sys.stdin.buffer.read()).decode())'";

export function runsInPlace(command: string): boolean {
  if (!PLAIN_WORDS.test(command)) return false;
  const words = command.split(/\s+/).filter(Boolean);
  return words.length > 0 && !words[0]!.includes("=") && !NOT_IN_PLACE.has(words[0]!);
}

// commands._TIMEOUT_WORDS: `timeout` runs a plain-words command's program itself (no builtin of dash,
// bash or BusyBox ash first; `command -v` finds it, else the command gets its `sh`).
// prettier-ignore
const SHELL_BUILTINS = new Set(
  ("alias bg bind bltin break builtin caller cd chdir command compgen complete compopt continue declare " +
    "dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs kill let local " +
    "logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt source suspend test " +
    "times trap true type typeset ulimit umask unalias unset wait [ [[ ]] :").split(" "),
);
const IN_BACKGROUND = " >&3 2>&1 </dev/null 3>&- &";
const TIMEOUT_SH = 'timeout -s KILL "$1" sh -c "$4"' + IN_BACKGROUND;
const TIMEOUT_WORDS = 'if command -v "${4%% *}" >/dev/null 2>&1; then timeout -s KILL "$1" $4' + IN_BACKGROUND + " else " + TIMEOUT_SH + " fi";

export function runsWithoutShell(command: string): boolean {
  return runsInPlace(command) && !SHELL_BUILTINS.has(command.split(/\s+/).filter(Boolean)[0]!);
}

export function needsOwnShell(command: string): boolean {
  return OWN_SHELL_WORDS.some((word) => command.includes(word));
}

export interface UserCommand {
  script: string;
  args: string[];
  wrapper: string;
  inline(): string;
  staged(): string;
}

let templates: { watchdog: string; direct: string; pyTimeout: string } | undefined;
function wrapperTemplates() {
  templates ??= {
    watchdog: loadScript("watchdog.sh"),
    direct: loadScript("direct.sh"),
    pyTimeout: loadPyScript("timeout.py").replace(/\n$/, ""),
  };
  return templates;
}

// The wrapper depends only on how the command runs and the encoder: built and hashed once per kind (per
// call it cost 0.2 ms of string replacing and SHA-256 on a busy machine, a tenth of the whole call).
const wrappers = new Map<string, { script: string; wrapper: string }>();
function wrapperScript(how: string, base64: boolean): { script: string; wrapper: string } {
  const key = `${how}\0${base64}`;
  let found = wrappers.get(key);
  if (found === undefined) {
    const t = wrapperTemplates();
    let script: string;
    if (how === "timeout" || how === "timeout-words" || how === "python3") {
      const watchdog =
        how === "timeout" ? TIMEOUT_SH : how === "timeout-words" ? TIMEOUT_WORDS : "python3 -S -c '" + t.pyTimeout + "' \"$1\" \"$4\"" + IN_BACKGROUND;
      script = t.watchdog.replaceAll("RUNNER", watchdog);
    } else script = t.direct.replaceAll("RUNNER", how);
    script = script.replaceAll("ENCODER", base64 ? "LC_ALL=C base64" : PY_BASE64);
    found = { script, wrapper: `${WRAPPER_PREFIX}${createHash("sha256").update(script, "utf-8").digest("hex").slice(0, 20)}.sh` };
    wrappers.set(key, found);
  }
  return found;
}

export function userCommand(
  command: string,
  o: { timeout: number; maxOutput: number; stagingDir: string; cwd: string; runner: Runner; hasBase64?: boolean; capture?: string; seq?: number; sweep?: number },
): UserCommand {
  const how =
    o.runner === "none"
      ? runsInPlace(command)
        ? IN_PLACE
        : needsOwnShell(command)
          ? OWN_SHELL
          : SUBSHELL
      : o.runner === "timeout" && runsWithoutShell(command)
        ? "timeout-words"
        : o.runner;
  const { script, wrapper } = wrapperScript(how, o.hasBase64 !== false);
  const sweep = o.sweep ? String(o.sweep) : "";
  const args = [String(o.timeout), String(o.maxOutput + 1), o.stagingDir, command, o.cwd, o.capture ?? "o", String(o.seq ?? 1), sweep];
  return {
    script,
    args,
    wrapper,
    inline: () => runtimeCommand(["sh", "-c", script, "sh", ...args]),
    staged: () => runtimeCommand(["sh", "-c", `. ./${STAGING_DIRNAME}/${wrapper}`, "sh", ...args]),
  };
}

export function wrapperMissing(stdout: string, stderr: string, exitCode: number, wrapper: string): boolean {
  const message = `sh: 1: .: cannot open ./${STAGING_DIRNAME}/${wrapper}: `;
  return !stdout && exitCode === 2 && stderr.startsWith(message) && (stderr.match(/\n/g)?.length ?? 0) <= 1;
}

export function buildStageWrapper(temporary: string, final: string): string {
  return runtimeCommand(["mv", "-f", temporary, final]);
}

export interface CommandResult {
  output: string;
  exitCode: number | null;
  truncated: boolean;
  timedOut: boolean;
}

const UTF8 = new TextDecoder("utf-8");
const RUNTIME_TIMED_OUT = /timed out after ([0-9]+(?:\.[0-9]+)?) seconds\s*$/;

export function parseUserCommand(stdout: string, stderr: string, exitCode: number, o: { timeout: number; maxOutput: number; runner: Runner }): CommandResult {
  if (stdout.startsWith("@LKC! ")) {
    const what = stdout.slice(6).trim();
    const detail =
      { capture: "cannot create the output capture file in the staging directory", cwd: "cannot enter the working directory" }[what] ?? what;
    return { output: `Error: sandbox wrapper failed: ${detail}`, exitCode: null, truncated: false, timedOut: false };
  }
  const nl = stdout.indexOf("\n");
  const head = nl >= 0 ? stdout.slice(0, nl) : stdout;
  const body = nl >= 0 ? stdout.slice(nl + 1) : "";
  const fields = head.split(" ");
  if (fields[0] !== "@LKC" || fields.length !== 4 || !/^[-+]?\d+$/.test(fields[1]!.trim())) return runtimeFailure(stdout, stderr, exitCode);
  let code = Number.parseInt(fields[1]!, 10);
  const compact = body.replace(/\s+/g, "");
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(compact) || compact.length % 4 === 1) {
    return { output: `Error: undecodable command output: ${body.slice(0, 200)}`, exitCode: code, truncated: false, timedOut: false };
  }
  const raw = Buffer.from(compact, "base64");
  const truncated = raw.length > o.maxOutput;
  let text = UTF8.decode(raw.subarray(0, o.maxOutput));
  const timedOut = o.runner !== "none" && killedAtDeadline(code, fields[2]!, fields[3]!, o.timeout);
  if (timedOut) {
    const note = `Error: command timed out after ${o.timeout} seconds and was killed inside the sandbox.`;
    text = text ? `${text}\n${note}` : note;
    code = RUNTIME_TIMEOUT_EXIT;
  } else if (code === SIGKILLED_EXIT) {
    text = text ? `${text}\n${SIGKILLED_NOTE}` : SIGKILLED_NOTE;
  }
  return { output: text, exitCode: code, truncated, timedOut };
}

const SIGKILLED_EXIT = 128 + 9;
/** Said of a command that died of SIGKILL before its timeout (the Python client's commands.SIGKILLED_NOTE). */
export const SIGKILLED_NOTE =
  "Error: exit code 137 before the timeout: the command was killed by SIGKILL (unless it exited 137 itself), " +
  "in a sandbox most likely by the kernel's out of memory (OOM) killer, the command having used more memory " +
  "than the sandbox's memory limit (else by a `kill -9`). Use less memory, or a template with a higher limit.";

function killedAtDeadline(code: number, start: string, end: string, timeout: number): boolean {
  if (code !== RUNTIME_TIMEOUT_EXIT && code !== 128 + 9) return false;
  const elapsed = Number(end) - Number(start);
  if (Number.isNaN(elapsed) || start.trim() === "" || end.trim() === "") return true;
  return elapsed >= timeout - 0.05;
}

function runtimeFailure(stdout: string, stderr: string, exitCode: number): CommandResult {
  const message = (stderr || stdout).trim() || `runtime exit code ${exitCode}`;
  if (message.includes("timed out")) {
    const match = RUNTIME_TIMED_OUT.exec(message);
    const after = match ? ` after ${Number(match[1])} seconds` : "";
    return {
      output: `Error: command timed out${after}: the sandbox runtime killed the command at its own timeout (SANDBOX_EXEC_TIMEOUT_SECONDS); its output is lost.`,
      exitCode: RUNTIME_TIMEOUT_EXIT,
      truncated: false,
      timedOut: true,
    };
  }
  return { output: `Error: the sandbox runtime failed to run the command: ${message}`, exitCode: null, truncated: false, timedOut: false };
}

// ---- files
let uploadScript: string | undefined;
export function buildUploadFinalize(items: ReadonlyArray<[string, string, string]>): string {
  uploadScript ??= loadScript("upload.sh");
  return shCommand(uploadScript, ...items.flat());
}

export function parseUploadFinalize(stdout: string, count: number): Array<string | null> {
  const codes = stdout
    .split(/\r\n|\r|\n/)
    .filter((line) => line.startsWith("@U "))
    .map((line) => line.slice(3).trim());
  if (codes.length !== count) throw new MalformedResponse(`upload finalize answered ${codes.length} of ${count} items: ${stdout.slice(0, 200)}`);
  return codes.map((code) => (code === "ok" ? null : code));
}

let downloadScript: string | undefined;
export function buildDownloadPrepare(
  items: ReadonlyArray<[string, string]>,
  o: { stagingDir: string; token: string; inlineMax: number; inlineBudget: number },
): string {
  downloadScript ??= loadScript("download.sh");
  return shCommand(downloadScript, o.stagingDir, o.token, String(o.inlineMax), String(o.inlineBudget), ...items.flat());
}

export interface DownloadPrep {
  content?: Uint8Array;
  staged?: string;
  error?: string;
}

const STAGED_NAME = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}$/;

export function parseDownloadPrepare(stdout: string, count: number): DownloadPrep[] {
  const results: DownloadPrep[] = [];
  let current: string[] | null = null;
  const garbage = (why: string) => new MalformedResponse(`download prepare answered ${why}: ${stdout.slice(0, 200)}`);
  const flush = () => {
    if (current === null) return;
    const text = current.join("");
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) throw garbage("content that is not base64");
    results.push({ content: new Uint8Array(Buffer.from(text, "base64")) });
  };
  for (const line of stdout.split(/\r\n|\r|\n/)) {
    if (line.startsWith("@D! ")) {
      current = null;
      results.push({ error: "read_error" });
    } else if (line.startsWith("@D ")) {
      flush();
      current = null;
      const rest = line.slice(3);
      const sp = rest.indexOf(" ");
      const kind = sp >= 0 ? rest.slice(0, sp) : rest;
      if (kind === "inline") current = [];
      else if (kind === "staged") {
        const after = sp >= 0 ? rest.slice(sp + 1) : "";
        const sp2 = after.indexOf(" ");
        const name = sp2 >= 0 ? after.slice(sp2 + 1) : "";
        if (!STAGED_NAME.test(name)) throw garbage(`a staged name that is not a plain file name (${name.slice(0, 80)})`);
        results.push({ staged: name });
      } else results.push({ error: kind });
    } else if (current !== null) current.push(line);
  }
  flush();
  if (results.length !== count) throw new MalformedResponse(`download prepare answered ${results.length} of ${count} paths: ${stdout.slice(0, 200)}`);
  return results;
}

export function buildRemove(paths: readonly string[]): string {
  return runtimeCommand(["rm", "-f", ...paths]);
}

let deleteScript: string | undefined;
/** scripts/delete.sh: `rm -rf` of the target, its own location confined when `confine` is set. */
export function buildDelete(path: string, confine: string): string {
  deleteScript ??= loadScript("delete.sh");
  return shCommand(deleteScript, path, confine);
}

let confineScript: string | undefined;
/** scripts/confine.sh: before deepagents' own read/glob scripts, refuse a symlink out of `confine`. */
export function buildConfineCheck(path: string, confine: string): string {
  confineScript ??= loadScript("confine.sh");
  return shCommand(confineScript, path, confine);
}

/** The word after `marker` on the script's answer line ("@X ok" -> "ok"). */
export function parseMarker(stdout: string, marker: string): string {
  for (const line of stdout.split(/\r\n|\r|\n/)) if (line.startsWith(marker + " ")) return line.slice(marker.length + 1).trim();
  throw new MalformedResponse(`unexpected answer from the sandbox (no ${marker} line): ${stdout.slice(0, 200)}`);
}

// ---- grep: GNU grep where the probe found it (scripts/grep.sh), else scripts/grep.py
export const GREP_MATCH_LIMIT = 10_000;
export const GREP_TIME_BUDGET = 20;
export const GREP_KILLED = new Set([-9, 128 + 9]);
const GLOB_CHARS = /[*?[\\]/;

/** Whether GNU grep answers exactly as grep.py would (no glob, no confinement, plain excluded names). */
export function gnuGrepFits(root: string, excludeDirs: readonly string[], glob: string | null | undefined, confine: string): boolean {
  if (glob || confine) return false;
  if (excludeDirs.some((name) => GLOB_CHARS.test(name))) return false;
  const last = root.replace(/\/+$/, "").split("/").pop() ?? "";
  return !excludeDirs.includes(last);
}

let grepScript: string | undefined;
export function buildGnuGrep(alternatives: readonly string[], root: string, o: { excludeDirs: readonly string[]; cap: number; budget: number | null }): string {
  grepScript ??= loadScript("grep.sh");
  const args = o.excludeDirs.map((name) => `--exclude-dir=${name}`);
  for (const pattern of alternatives) args.push("-e", pattern);
  const script = ["sh", "-c", grepScript, "lkc", String(o.cap), ...args, "--", root];
  return runtimeCommand(o.budget === null ? script : ["timeout", "-s", "KILL", String(o.budget), ...script]);
}

const GREP_RECORD = /^(\/[^\0\n]*)\0([0-9]{1,18}):([^\n]*)\n/gm;
export type GrepRow = [string, number, string];
const byPath = (a: GrepRow, b: GrepRow) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);

function splitStatus(stdout: string): string {
  const at = stdout.startsWith("@E") ? 0 : stdout.indexOf("\n@E") + 1;
  if (at || stdout.startsWith("@E")) return stdout.slice(0, at);
  return stdout.slice(0, stdout.lastIndexOf("\n") + 1); // after the last line break: a record cut short
}

/** grep.sh's records sorted by path (code units; the sort is stable), or null when a name holds a line break. */
export function gnuGrepRows(stdout: string): GrepRow[] | null {
  const body = splitStatus(stdout);
  const rows: GrepRow[] = [];
  for (const m of body.matchAll(GREP_RECORD)) rows.push([m[1]!, Number(m[2]), m[3]!]);
  if (rows.length !== (body.match(/\n/g)?.length ?? 0)) return null;
  return rows.sort(byPath);
}

/** gnuGrepRows record by record, for names holding line breaks. */
export function gnuGrepRowsSlowly(stdout: string): GrepRow[] {
  const rows: GrepRow[] = [];
  let pos = 0;
  while (pos < stdout.length) {
    if (stdout.startsWith("@E", pos)) break;
    const nul = stdout.indexOf("\0", pos);
    const colon = nul >= 0 ? stdout.indexOf(":", nul + 1) : -1;
    const end = colon >= 0 ? stdout.indexOf("\n", colon) : -1;
    if (end < 0 || !/^[0-9]{1,18}$/.test(stdout.slice(nul + 1, colon))) break;
    rows.push([stdout.slice(pos, nul), Number(stdout.slice(nul + 1, colon)), stdout.slice(colon + 1, end)]);
    pos = end + 1;
  }
  return rows.sort(byPath);
}

/** `{a,b}` groups expanded (nested too), bounded; unbalanced braces stay literal (pyscripts.expand_braces). */
export function expandBraces(pattern: string, limit = 256): string[] {
  const start = pattern.indexOf("{");
  if (start < 0) return [pattern];
  let depth = 0;
  let end = -1;
  for (let i = start; i < pattern.length; i++) {
    if (pattern[i] === "{") depth++;
    else if (pattern[i] === "}") {
      depth--;
      if (depth === 0) {
        end = i;
        break;
      }
    }
  }
  if (end < 0) return [pattern];
  const body = pattern.slice(start + 1, end);
  const parts: string[] = [];
  let current = "";
  depth = 0;
  for (const ch of body) {
    if (ch === "," && depth === 0) {
      parts.push(current);
      current = "";
      continue;
    }
    if (ch === "{") depth++;
    if (ch === "}") depth--;
    current += ch;
  }
  parts.push(current);
  const prefix = pattern.slice(0, start);
  const suffix = pattern.slice(end + 1);
  if (parts.length < 2) return expandBraces(suffix, limit).map((tail) => prefix + "{" + body + "}" + tail);
  const out: string[] = [];
  for (const part of parts) {
    for (const item of expandBraces(part + suffix, limit)) {
      out.push(prefix + item);
      if (out.length > limit) throw new RangeError("glob pattern expands to too many alternatives");
    }
  }
  return out;
}

/** One python3 run (scripts/grep.py) that walks `path` and prints every matching line as JSON. */
export function buildGrep(
  pattern: string,
  path: string,
  glob: string | null | undefined,
  o: { maxCount: number | null; excludeDirs: readonly string[]; confine: string; timeBudget?: number },
): string {
  const alternatives = pattern.split("\n").filter(Boolean);
  let mode: string | null = null;
  let globs: string[] = [];
  if (glob) {
    mode = glob.includes("/") ? "path" : "base";
    globs = expandBraces(glob).map((g) => {
      const negated = g.replaceAll("[^", "[!"); // fnmatch reads "[^" literally; grep --include negates
      return mode === "path" ? negated.replace(/^\/+/, "") : negated;
    });
  }
  const cap = o.maxCount !== null ? o.maxCount + 1 : GREP_MATCH_LIMIT + 1;
  const payload = {
    p: path,
    q: alternatives.length ? alternatives : [pattern],
    g: globs,
    gm: mode,
    x: [...o.excludeDirs],
    c: cap,
    t: new PyFloat(o.timeBudget ?? GREP_TIME_BUDGET),
    r: o.confine,
  };
  return pythonCommand(pyGrep(), pyJson(payload));
}

let grepPy: string | undefined;
const pyGrep = () => (grepPy ??= loadPyScript("grep.py"));

// ---- python3 programs (pyscripts.py): ls and edit
/** A number Python holds as a float (json.dumps writes 20.0, not 20). */
export class PyFloat {
  constructor(readonly value: number) {}
}

/** Python's json.dumps with its defaults: ", " and ": " separators, every non-ASCII character escaped. */
export function pyJson(value: unknown): string {
  if (value instanceof PyFloat) return Number.isInteger(value.value) ? `${value.value}.0` : JSON.stringify(value.value);
  if (value === null || typeof value === "boolean" || typeof value === "number") return JSON.stringify(value);
  if (typeof value === "string") return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  if (Array.isArray(value)) return "[" + value.map(pyJson).join(", ") + "]";
  return "{" + Object.entries(value as Record<string, unknown>).map(([k, v]) => `${pyJson(k)}: ${pyJson(v)}`).join(", ") + "}";
}

export function pythonCommand(script: string, arg: string): string {
  return runtimeCommand(["python3", "-S", "-c", script, arg]);
}

export const EDIT_INLINE_MAX = 8 * 1024;
let pyScripts: { ls: string; edit: string } | undefined;
const py = () => (pyScripts ??= { ls: loadPyScript("ls.py"), edit: loadPyScript("edit.py") });

export function buildLs(path: string, confine: string): string {
  return pythonCommand(py().ls, pyJson({ p: path, r: confine }));
}

export function editPayload(path: string, old: string, replacement: string, replaceAll: boolean, confine: string): string {
  return pyJson({ p: path, o: old, n: replacement, a: replaceAll, r: confine });
}

/** `payloadOrStagedPath`: the JSON payload itself, or the absolute path of its staged copy. */
export function buildEdit(payloadOrStagedPath: string): string {
  return pythonCommand(py().edit, payloadOrStagedPath);
}

export interface JsonLines {
  records: Array<Record<string, unknown>>;
  error: string | null;
  done: Record<string, unknown> | null;
}

export function parseJsonLines(stdout: string): JsonLines {
  const answer: JsonLines = { records: [], error: null, done: null };
  for (const line of stdout.split(/\r\n|\r|\n/)) {
    if (!line.trim()) continue;
    let data: unknown;
    try {
      data = JSON.parse(line);
    } catch {
      continue;
    }
    if (!data || typeof data !== "object" || Array.isArray(data)) continue;
    const d = data as Record<string, unknown>;
    if ("error" in d) answer.error = String(d.error);
    else if ("done" in d) answer.done = d;
    else answer.records.push(d);
  }
  return answer;
}
