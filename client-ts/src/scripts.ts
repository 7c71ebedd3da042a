// The scripts of the execute wrapper and the file operations, and the commands built from them: the same
// bytes as langchain_k8s_client.commands sends (the probe: probe.ts; GNU grep: gnu-grep.ts; the python3
// programs: pyscripts.ts; how a script is loaded and carried: script-text.ts).
import { createHash } from "node:crypto";
import { MalformedResponse } from "./errors.js";
import { STAGING_DIRNAME, type Runner } from "./probe.js";
import { loadPyScript, loadScript, runtimeCommand, shCommand } from "./script-text.js";

// ---- the protocol's values (generated from langchain_k8s_client.protocol)
import { RUNTIME_TIMEOUT_EXIT, SIGKILLED_EXIT, SIGKILLED_NOTE, WRAPPER_ERROR_MARKER, WRAPPER_MARKER, WRAPPER_PREFIX } from "./generated/protocol.js";
export { RUNTIME_TIMEOUT_EXIT, SIGKILLED_NOTE, WRAPPER_PREFIX };

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
  if (stdout.startsWith(WRAPPER_ERROR_MARKER)) {
    const what = stdout.slice(6).trim();
    const detail =
      { capture: "cannot create the output capture file in the staging directory", cwd: "cannot enter the working directory" }[what] ?? what;
    return { output: `Error: sandbox wrapper failed: ${detail}`, exitCode: null, truncated: false, timedOut: false };
  }
  const nl = stdout.indexOf("\n");
  const head = nl >= 0 ? stdout.slice(0, nl) : stdout;
  const body = nl >= 0 ? stdout.slice(nl + 1) : "";
  const fields = head.split(" ");
  if (fields[0] !== WRAPPER_MARKER || fields.length !== 4 || !/^[-+]?\d+$/.test(fields[1]!.trim())) return runtimeFailure(stdout, stderr, exitCode);
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


function killedAtDeadline(code: number, start: string, end: string, timeout: number): boolean {
  if (code !== RUNTIME_TIMEOUT_EXIT && code !== SIGKILLED_EXIT) return false;
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
