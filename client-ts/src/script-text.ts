// The in-pod scripts as they are sent, read from the files the Python client ships (copied into this
// package at build time by tools/copy-scripts.mjs), and the command line that carries them: the same
// bytes as langchain_k8s_client.script_text (every script runs as `sh -c <script> lkc <args>`, all data
// as positional arguments, never shell text).
import { readFileSync } from "node:fs";

const SCRIPTS_DIR = new URL("../../scripts/", import.meta.url);
const SH_INCLUDE = /^\s*\. \.\/([a-z_]+\.sh)\s*$/;
const PY_INCLUDE = /^#: include ([a-z_]+\.py)$/;

function scriptLines(name: string): string[] {
  const lines = readFileSync(new URL(name, SCRIPTS_DIR), "utf-8").split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/** script_text.load_script: comment lines and indentation dropped, `. ./other.sh` lines inlined. */
export function loadScript(name: string): string {
  const lines: string[] = [];
  for (const line of scriptLines(name)) {
    const include = SH_INCLUDE.exec(line);
    if (include) lines.push(loadScript(include[1]!));
    else if (!line.trimStart().startsWith("#")) lines.push(line.trimStart());
  }
  return lines.join("\n");
}

/** script_text.load_pyscript: whole-line comments dropped, `#: include x.py` lines inlined. */
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
