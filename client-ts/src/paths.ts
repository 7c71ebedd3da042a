// Path rules of the backend (langchain_k8s_client.paths, rule for rule): validation, virtual mode, allowed
// write prefixes. Pure string work before a request leaves the process; what needs the pod's filesystem
// (symlinks) is checked inside the pod by the shared scripts, with the `confine` root chosen here.
export type FileErrorCode = "file_not_found" | "permission_denied" | "is_directory" | "invalid_path";

/** A path refused before reaching the pod; `code` is a deepagents error code. */
export class PathRefused extends Error {
  constructor(
    readonly code: FileErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "PathRefused";
  }
}

/** A caller path mapped to the pod: `real` inside the pod, `confine` the directory the operation must
 * physically stay in (symlinks resolved), or "" for no check. */
export interface ResolvedPath {
  virtual: string;
  real: string;
  confine: string;
}

export interface PathPolicyOptions {
  /** Caller paths are relative to `rootDir` in the pod; `..`, a leading `~` and symlinks out are invalid_path. */
  virtualMode?: boolean;
  rootDir?: string;
  /** Writes (write, edit, delete, upload) outside these prefixes are permission_denied; reads are not limited. */
  allowPrefixes?: readonly string[];
}

/** Collapse `//` and `.` segments and drop a trailing slash; keep `..` as is. */
export function normalize(path: string): string {
  return "/" + path.split("/").filter((seg) => seg !== "" && seg !== ".").join("/");
}

/** Whether normalized `path` is `prefix` or inside it (segment-wise, not textual). */
export function isUnder(path: string, prefix: string): boolean {
  return prefix === "/" || path === prefix || path.startsWith(prefix + "/");
}

export const NAME_MAX = 255;
export const PATH_MAX = 4095;

// Python's repr of a str, for messages identical to the Python client's (ASCII paths: exact).
function repr(value: string): string {
  const quote = value.includes("'") && !value.includes('"') ? '"' : "'";
  let out = "";
  for (const ch of value) {
    const code = ch.codePointAt(0)!;
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += "\\" + ch;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (code < 0x20 || code === 0x7f) out += "\\x" + code.toString(16).padStart(2, "0");
    else out += ch;
  }
  return quote + out + quote;
}

export class PathPolicy {
  readonly virtualMode: boolean;
  readonly rootDir: string;
  /** Longest first, so the confinement root is the most specific prefix. */
  readonly allowPrefixes: readonly string[] | null;

  constructor(o: PathPolicyOptions = {}) {
    if (o.virtualMode) {
      if (!o.rootDir || !o.rootDir.startsWith("/")) throw new RangeError("virtualMode needs an absolute rootDir");
      if (o.rootDir.split("/").includes("..")) throw new RangeError("rootDir must not contain '..'");
    } else if (o.rootDir !== undefined) {
      throw new RangeError("rootDir is only meaningful with virtualMode: true");
    }
    this.virtualMode = Boolean(o.virtualMode);
    this.rootDir = o.rootDir ? normalize(o.rootDir) : "/";
    if (o.allowPrefixes === undefined) this.allowPrefixes = null;
    else {
      const prefixes = o.allowPrefixes.map((prefix) => {
        if (!prefix.startsWith("/") || prefix.split("/").includes("..")) {
          throw new RangeError(`allowPrefixes entries must be absolute without '..': ${repr(prefix)}`);
        }
        return normalize(prefix);
      });
      this.allowPrefixes = prefixes.map((p, i) => [p, i] as const).sort((a, b) => b[0].length - a[0].length || a[1] - b[1]).map(([p]) => p);
    }
  }

  /** Whether any rule beyond "absolute, no NUL" applies. */
  get restricted(): boolean {
    return this.virtualMode || this.allowPrefixes !== null;
  }

  toReal(virtual: string): string {
    if (!this.virtualMode) return virtual;
    return virtual === "/" ? this.rootDir : this.rootDir.replace(/\/+$/, "") + virtual;
  }

  /** A pod path as a caller path; null when it lies outside rootDir. */
  toVirtual(real: string): string | null {
    if (!this.virtualMode) return real;
    real = normalize(real);
    if (!isUnder(real, this.rootDir)) return null;
    if (this.rootDir === "/") return real;
    return real.slice(this.rootDir.length) || "/";
  }

  /** Validate `path` for a read (default) or a write and map it to the pod (PathRefused otherwise). */
  resolve(path: string, write = false): ResolvedPath {
    if (typeof path !== "string" || !path) throw new PathRefused("invalid_path", `invalid path ${typeof path === "string" ? repr(path) : String(path)}`);
    if (path.includes("\0")) throw new PathRefused("invalid_path", `path contains a NUL byte: ${repr(path)}`);
    if (!path.startsWith("/")) throw new PathRefused("invalid_path", `path must be absolute: ${repr(path)}`);
    if (this.restricted && path.split("/").includes("..")) throw new PathRefused("invalid_path", `'..' is not allowed in ${repr(path)}`);
    const virtual = normalize(path);
    if (this.virtualMode && (virtual.split("/")[1] ?? "").startsWith("~")) {
      throw new PathRefused("invalid_path", `'~' is not allowed at the start of ${repr(path)}`);
    }
    const real = this.toReal(virtual);
    checkLengths(path, real);
    let confine = this.virtualMode ? this.rootDir : "";
    if (write && this.allowPrefixes !== null) {
      const match = this.allowPrefixes.find((p) => isUnder(virtual, p));
      if (match === undefined) {
        const allowed = this.allowPrefixes.join(", ") || "(none)";
        throw new PathRefused("permission_denied", `${repr(path)} is outside the allowed write prefixes: ${allowed}`);
      }
      confine = this.toReal(match);
    }
    return { virtual, real, confine };
  }

  /** A search root (ls/grep/glob); undefined means "/" (the root in virtual mode). */
  resolveDir(path: string | undefined | null): ResolvedPath {
    return this.resolve(path || "/");
  }

  display(real: string): string {
    return this.toVirtual(real) ?? real;
  }
}

function checkLengths(path: string, real: string): void {
  // The kernel refuses longer names with ENAMETOOLONG, which the pod's scripts would report as the nearest
  // error they know (permission_denied): say what is wrong before anything is sent.
  const raw = Buffer.from(real, "utf-8");
  if (raw.length > PATH_MAX) throw new PathRefused("invalid_path", `path is longer than ${PATH_MAX} bytes (${raw.length}): ${repr(path.slice(0, 80))}...`);
  const longest = Math.max(0, ...real.split("/").map((part) => Buffer.byteLength(part, "utf-8")));
  if (longest > NAME_MAX) throw new PathRefused("invalid_path", `a name is longer than ${NAME_MAX} bytes (${longest}): ${repr(path.slice(0, 80))}`);
}
