// GNU grep where the probe found it (scripts/grep.sh): its command and parsers, as
// langchain_k8s_client.gnu_grep (else grep() runs scripts/grep.py: pyscripts.ts).
import * as protocol from "./generated/protocol.js";
import { randomBytes } from "node:crypto";
import { loadScript, runtimeCommand, shCommand } from "./script-text.js";

export const GREP_KILLED: ReadonlySet<number> = new Set<number>(protocol.GREP_KILLED);
const GLOB_CHARS = /[*?[\\]/;

/** Whether GNU grep answers exactly as grep.py would (no glob, no confinement, plain excluded names). */
export function gnuGrepFits(root: string, excludeDirs: readonly string[], glob: string | null | undefined, confine: string): boolean {
  if (glob || confine) return false;
  if (excludeDirs.some((name) => GLOB_CHARS.test(name))) return false;
  const last = root.replace(/\/+$/, "").split("/").pop() ?? "";
  return !excludeDirs.includes(last);
}

let grepScript: string | undefined;
let stopScript: string | undefined;
const SEARCH_MARK = "lkc-";
const TAG = /^[0-9A-Za-z]{2,64}$/;

/** scripts/grep.sh: fixed-string alternatives under `root`, at most `cap` records. `tag` (a fresh random
 * word per search, `newTag`) marks its shell and its grep for `buildStopSearch(tag)`. */
export function buildGnuGrep(alternatives: readonly string[], root: string, o: { excludeDirs: readonly string[]; cap: number; tag?: string | null }): string {
  grepScript ??= loadScript("grep.sh");
  const marked = o.tag ? `${SEARCH_MARK}${o.tag}` : "lkc";
  const args = o.tag ? [`--label=${marked}`] : [];
  args.push(...o.excludeDirs.map((name) => `--exclude-dir=${name}`));
  for (const pattern of alternatives) args.push("-e", pattern);
  return runtimeCommand(["sh", "-c", grepScript, marked, String(o.cap), ...args, "--", root]);
}

/** scripts/stop_search.sh: SIGKILL to the search `buildGnuGrep(..., { tag })` started, if still running. The
 * time budget is the client's: no watchdog process runs beside a search in the pod. */
export function buildStopSearch(tag: string): string {
  if (!TAG.test(tag)) throw new Error(`a search tag is 2 to 64 letters or digits, not ${JSON.stringify(tag)}`);
  stopScript ??= loadScript("stop_search.sh");
  return shCommand(stopScript, tag[0]!, tag.slice(1));
}

/** A search's tag: 64 random bits, so a stop never meets another search's processes. */
export function newTag(): string {
  return randomBytes(8).toString("hex");
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
