// The python3 programs of scripts/ (ls, edit, grep) and their payloads, as langchain_k8s_client.pyscripts.
import { GREP_MATCH_LIMIT, GREP_TIME_BUDGET } from "./generated/protocol.js";
import { loadPyScript, runtimeCommand } from "./script-text.js";

export { EDIT_INLINE_MAX, GREP_MATCH_LIMIT, GREP_TIME_BUDGET } from "./generated/protocol.js";

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
