// The probe (scripts/probe.sh): what the runtime at an endpoint offers, RuntimeInfo; the same command and
// parsing as langchain_k8s_client.probe.
import * as addresses from "./addresses.js";
import { MalformedResponse } from "./errors.js";
import { POD_IDENTITY_TOKEN_PATH } from "./generated/contract.js";
import * as P from "./generated/protocol.js";
import { loadScript, shCommand } from "./script-text.js";

const { STAGING_DIRNAME, RUNTIME_DEFAULT_LIMIT } = P;
export { RUNTIME_DEFAULT_LIMIT, STAGING_DIRNAME };

export type Runner = (typeof P.RUNNERS)[number];

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
  if (lines[0] !== P.PROBE_MARKER) throw new MalformedResponse(`unexpected probe output from the runtime: ${stdout.slice(0, 200)}`);
  const fields = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const at = line.indexOf("=");
    if (at >= 0) fields.set(line.slice(0, at), line.slice(at + 1));
  }
  const base = fields.get(P.PROBE_BASE) ?? "";
  if (!base.startsWith("/")) throw new MalformedResponse(`runtime reported no usable base directory: ${base}`);
  const runner = fields.get(P.PROBE_RUNNER);
  return {
    baseDir: base,
    hostname: fields.get(P.PROBE_HOST) ?? "",
    runner: runner === "timeout" || runner === "python3" ? runner : "none",
    hasBase64: fields.get(P.PROBE_BASE64) === P.PROBE_YES,
    gnuGrep: fields.get(P.PROBE_GREP) === P.PROBE_GNU_GREP,
    execLimit: fields.get(P.PROBE_GROUP) === P.PROBE_YES ? execLimit(fields.get(P.PROBE_LIMIT)) : null,
    wrappers: new Set((fields.get(P.PROBE_WRAPPERS) ?? "").split(/\s+/).filter(Boolean)),
    stagesWrappers: fields.get(P.PROBE_SH) === P.PROBE_DASH,
    addresses: addresses.probeAddresses(fields.get(P.PROBE_V4) ?? "", fields.get(P.PROBE_V6) ?? ""),
    identityToken: fields.get(P.PROBE_IDTOKEN) ?? "",
  };
}

function execLimit(raw: string | undefined): number | null {
  if (raw === undefined || raw === P.PROBE_UNKNOWN_LIMIT) return null;
  const value = /^\s*[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?\s*$/i.test(raw) ? Number(raw) : NaN;
  if (Number.isNaN(value) && !/^\s*[-+]?(inf|infinity|nan)\s*$/i.test(raw)) return RUNTIME_DEFAULT_LIMIT;
  return Number.isFinite(value) && value > 0 ? value : RUNTIME_DEFAULT_LIMIT;
}
