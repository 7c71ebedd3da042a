// When to report activity (langchain_k8s_client.activity): throttled, no timer, never late for a long
// command; and the annotation's value (agentsession_api.activity.format_activity).
import { ACTIVITY_PATTERN, DURATION_PATTERN, UNITS_NS } from "./generated/contract.js";

export const MIN_INTERVAL = 1;
export const MAX_INTERVAL = 60;

const WHOLE = new RegExp(DURATION_PATTERN, "u");

/** Seconds of a Go-style duration the API server admitted, or null when it is not one. */
export function parseSeconds(text: string): number | null {
  if (!WHOLE.test(text)) return null;
  let ns = 0;
  for (const m of text.matchAll(new RegExp(`([0-9]+(?:\\.[0-9]+)?)(${Object.keys(UNITS_NS).join("|")})`, "gu"))) {
    ns += Math.trunc(Number(m[1]) * UNITS_NS[m[2] as keyof typeof UNITS_NS]);
  }
  return ns / 1e9;
}

/** A fifth of the idle timeout, between 1 s and 60 s (60 s without one). */
export function intervalFor(idleTimeout: string | null | undefined): number {
  const seconds = idleTimeout ? parseSeconds(idleTimeout) : null;
  if (seconds === null) return MAX_INTERVAL;
  return Math.min(MAX_INTERVAL, Math.max(MIN_INTERVAL, seconds / 5));
}

/** Python's `format(x, "g")` (6 significant digits, no trailing zeros). */
export function formatG(x: number): string {
  if (x === 0) return "0";
  const exponent = Math.floor(Math.log10(Math.abs(Number(x.toPrecision(6)))));
  if (exponent < -4 || exponent >= 6) {
    const [mantissa, exp] = x.toExponential(5).split("e");
    const m = mantissa!.includes(".") ? mantissa!.replace(/0+$/, "").replace(/\.$/, "") : mantissa!;
    const e = Number(exp);
    return `${m}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  }
  const fixed = x.toFixed(Math.max(0, 5 - exponent));
  return fixed.includes(".") ? fixed.replace(/0+$/, "").replace(/\.$/, "") : fixed;
}

/** The annotation's value for a report made at `now`: `<UTC time, microseconds, Z> busy=<seconds>`. */
export function formatActivity(now: Date, busySeconds = 0): string {
  const stamp = now.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
  // Below 1e-4 `%g` writes an exponent, which the operator's pattern refuses (the report would be lost:
  // the rest of a busy window when waking a session can be that small): such a window is no window.
  const busy = busySeconds < 1e-4 ? 0 : busySeconds;
  const value = `${stamp} busy=${formatG(busy)}`;
  if (!new RegExp(ACTIVITY_PATTERN).test(value)) throw new Error(`activity value ${value} does not match the contract`);
  return value;
}

const monotonic = () => performance.now() / 1000;

export class ActivityThrottle {
  private lastReport: number | null = null;
  private busyUntil = 0;
  constructor(public interval = MAX_INTERVAL) {}

  /** The busy seconds to report now, or null to skip; reserves the report. */
  claim(busySeconds: number | null | undefined, now = monotonic()): number | null {
    const busy = Math.max(0, busySeconds ?? 0);
    const due = this.lastReport === null || now - this.lastReport >= this.interval;
    // Re-announce "busy" only when it protects noticeably longer than the last report did.
    const extends_ = busy > 0 && now + busy > this.busyUntil + this.interval;
    if (!(due || extends_)) return null;
    this.lastReport = now;
    this.busyUntil = Math.max(this.busyUntil, now + busy);
    return busy;
  }

  /** For a report sent at once (waking a suspended session): what remains of the announced busy window. */
  wake(now = monotonic()): number {
    this.lastReport = now;
    return Math.max(0, this.busyUntil - now);
  }

  forget(): void {
    this.lastReport = null;
    this.busyUntil = 0;
  }
}
