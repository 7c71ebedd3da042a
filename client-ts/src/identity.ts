// The pod proves which pod it is before the client sends it anything of the session (langchain_k8s_client.pod_identity).
//
// A pod name is unique only within a namespace and an IP only while its pod lives, so what a pod says about
// itself (its name, its addresses) cannot tell a session's pod from a namesake in another namespace at the IP a
// stale status names. What it cannot say falsely is its identity token: a projected ServiceAccount token that the
// kubelet mints for that pod alone (the `agentsession-pod-identity` volume of its template), signed with the
// cluster's ServiceAccount keys, naming its namespace and pod. Its audience is ours, so the API server itself
// refuses it: showing it to a client grants nothing.
//
// The client checks the signature against the keys the API server publishes (/openid/v1/jwks, readable by every
// ServiceAccount by default), the audience, the validity window, and that the namespace and pod named are the
// session's. Everything here is pure but the key fetch (ClusterKeys.of).
import { createPublicKey, verify, type KeyObject } from "node:crypto";
import { performance } from "node:perf_hooks";
import * as k8s from "@kubernetes/client-node";
import { UnverifiedPod } from "./errors.js";
import { POD_IDENTITY_AUDIENCE, POD_IDENTITY_VOLUME } from "./generated/contract.js";
import { CLOCK_SKEW, MAX_TOKEN_BYTES } from "./generated/protocol.js";

/** "token" (default): the pod must show its identity token. "address": trust its name and addresses alone
 * (templates without the identity volume; a namesake at a reused IP is then not told apart). */
export type PodIdentityMode = "token" | "address";

export const JWKS_PATH = "/openid/v1/jwks";
/** Seconds a fetched key set is used before it is fetched again (the API server rotates keys rarely; a token
 * signed by a key not in the set fetches it again at the next resolution, at most every REFETCH_INTERVAL). */
export const KEYS_MAX_AGE = 600;
export const REFETCH_INTERVAL = 10;
export { CLOCK_SKEW, MAX_TOKEN_BYTES };

export function checkPodIdentity(mode: unknown): void {
  if (mode !== undefined && mode !== "token" && mode !== "address") {
    throw new RangeError(`podIdentity must be 'token' or 'address', got '${String(mode)}'`);
  }
}

const monotonic = () => performance.now() / 1000;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
/** Python's repr of what a token says, so both clients word their refusals alike. */
const repr = (v: unknown) => (typeof v === "string" ? `'${v}'` : v === undefined || v === null ? "None" : JSON.stringify(v));

const CURVES = new Set(["P-256", "P-384"]);
/** Bytes of each half of an ECDSA signature (r, s) by the curve's OpenSSL name. */
const HALF: Record<string, number> = { prime256v1: 32, secp384r1: 48 };
const str = (v: unknown) => (typeof v === "string" ? v : undefined);

/** An RSA or EC P-256/P-384 public key from a JWK; null for kinds the API server does not use. */
function publicKey(jwk: Record<string, unknown>): KeyObject | null {
  const { kty, n, e, crv, x, y } = jwk;
  try {
    if (kty === "RSA") return createPublicKey({ key: { kty, n: str(n), e: str(e) }, format: "jwk" });
    if (kty === "EC" && CURVES.has(str(crv) ?? "")) return createPublicKey({ key: { kty, crv: str(crv), x: str(x), y: str(y) }, format: "jwk" });
  } catch {
    return null;
  }
  return null;
}

const cache = new Map<string, ClusterKeys>();
const stale = new Set<string>();
const fetching = new Map<string, Promise<ClusterKeys>>();

/** The cluster's ServiceAccount token verification keys, by key ID, as fetched from `host` at `fetchedAt`
 * (monotonic seconds). */
export class ClusterKeys {
  constructor(
    readonly keys: ReadonlyMap<string, KeyObject>,
    readonly fetchedAt = 0,
    readonly host = "",
  ) {}

  static parse(jwks: unknown, fetchedAt = 0, host = ""): ClusterKeys {
    const keys = new Map<string, KeyObject>();
    const list = isObject(jwks) && Array.isArray(jwks.keys) ? jwks.keys : [];
    for (const jwk of list) {
      const key = isObject(jwk) ? publicKey(jwk) : null;
      if (key) keys.set(String(jwk.kid ?? ""), key);
    }
    return new ClusterKeys(keys, fetchedAt, host);
  }

  /** The key set of `kubeConfig`'s cluster, cached per API server for KEYS_MAX_AGE (sooner after a token named
   * a key the set lacks: the cluster may have added one). `now`: monotonic seconds (tests). */
  static async of(kubeConfig: k8s.KubeConfig, now = monotonic()): Promise<ClusterKeys> {
    const host = kubeConfig.getCurrentCluster()?.server ?? "";
    const cached = cache.get(host);
    if (cached) {
      const age = now - cached.fetchedAt;
      if (age < REFETCH_INTERVAL || (age < KEYS_MAX_AGE && !stale.has(host))) return cached;
    }
    let pending = fetching.get(host);
    if (!pending) {
      pending = fetchKeys(kubeConfig, now, host).finally(() => fetching.delete(host));
      fetching.set(host, pending);
    }
    return pending;
  }
}

async function fetchKeys(kubeConfig: k8s.KubeConfig, now: number, host: string): Promise<ClusterKeys> {
  let keys: ClusterKeys;
  try {
    // The API client's own auth and TLS; it parses application/jwk-set+json itself (typed string: both handled).
    const body: unknown = await kubeConfig.makeApiClient(k8s.OpenidApi).getServiceAccountIssuerOpenIDKeyset();
    keys = ClusterKeys.parse(typeof body === "string" ? JSON.parse(body) : body, now, host);
  } catch (err) {
    // The check cannot be made, so nothing is sent.
    const why = err instanceof k8s.ApiException ? `HTTP ${err.code}: ${apiMessage(err)}` : String(err);
    throw new UnverifiedPod(
      `could not read the cluster's ServiceAccount keys at ${JWKS_PATH} to verify the sandbox pod's identity (${why}); ` +
        "allow `get` on that URL (docs/security.md, pod identity)",
    );
  }
  cache.set(host, keys);
  stale.delete(host);
  return keys;
}

function apiMessage(err: k8s.ApiException<unknown>): string {
  try {
    const body: unknown = typeof err.body === "string" ? JSON.parse(err.body) : err.body;
    if (isObject(body) && typeof body.message === "string") return body.message;
  } catch {
    // not JSON: its text
  }
  return String(err.body ?? "").slice(0, 200);
}

function unb64(text: string): Buffer {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) throw new Error("not base64url");
  return Buffer.from(text, "base64url");
}

function signatureOk(key: KeyObject, alg: string, signed: Buffer, signature: Buffer): boolean {
  try {
    if (key.asymmetricKeyType === "rsa" && alg === "RS256") return verify("sha256", signed, key, signature);
    if (key.asymmetricKeyType === "ec" && (alg === "ES256" || alg === "ES384")) {
      const half = HALF[key.asymmetricKeyDetails?.namedCurve ?? ""] ?? 0;
      if (signature.length !== 2 * half) return false;
      return verify(alg === "ES256" ? "sha256" : "sha384", signed, { key, dsaEncoding: "ieee-p1363" }, signature);
    }
  } catch {
    return false;
  }
  return false;
}

/** The claims of `token` once its signature, audience and validity window are checked (UnverifiedPod else).
 * `now`: seconds since the epoch. */
export function verifyToken(token: string, keys: ClusterKeys, now = Date.now() / 1000): Record<string, unknown> {
  if (token.length > MAX_TOKEN_BYTES) throw new UnverifiedPod("the pod's identity token is too large");
  const parts = token.split(".");
  let header: unknown, claims: unknown, signature: Buffer;
  try {
    if (parts.length !== 3) throw new Error(`${parts.length} parts, not 3`);
    header = JSON.parse(unb64(parts[0]!).toString("utf-8"));
    claims = JSON.parse(unb64(parts[1]!).toString("utf-8"));
    signature = unb64(parts[2]!);
  } catch (err) {
    throw new UnverifiedPod(`the pod's identity token is malformed (${(err as Error).message})`);
  }
  if (!isObject(header) || !isObject(claims)) throw new UnverifiedPod("the pod's identity token is malformed");
  const key = keys.keys.get(String(header.kid ?? ""));
  if (!key) {
    stale.add(keys.host); // the next endpoint resolution fetches the keys again
    throw new UnverifiedPod(`the pod's identity token is signed by key ${repr(header.kid)}, not one of the cluster's`);
  }
  if (!signatureOk(key, String(header.alg), Buffer.from(`${parts[0]}.${parts[1]}`), signature)) {
    throw new UnverifiedPod("the pod's identity token has a bad signature");
  }
  const audiences: unknown[] = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
  if (!audiences.includes(POD_IDENTITY_AUDIENCE)) {
    throw new UnverifiedPod(`the pod's identity token is for [${audiences.map(repr).join(", ")}], not ${POD_IDENTITY_AUDIENCE}`);
  }
  const exp = claims.exp;
  const nbf = "nbf" in claims ? claims.nbf : 0;
  if (typeof exp !== "number" || typeof nbf !== "number") throw new UnverifiedPod("the pod's identity token has no validity window");
  if (now > exp + CLOCK_SKEW || now < nbf - CLOCK_SKEW) throw new UnverifiedPod("the pod's identity token is expired or not yet valid");
  return claims;
}

/** What the pod reached must prove: a token of the cluster's naming `namespace`/`podName`. */
export class PodIdentity {
  constructor(
    readonly namespace: string,
    readonly podName: string,
    readonly keys: ClusterKeys,
  ) {}

  /** Throw UnverifiedPod unless `token` proves the pod is this session's. */
  check(token: string, now?: number): void {
    const who = `the session's pod ${this.namespace}/${this.podName}`;
    if (!token) {
      throw new UnverifiedPod(
        `the pod reached showed no identity token, so it cannot be told from a namesake: expected ${who}. ` +
          `Its SandboxTemplate needs the \`${POD_IDENTITY_VOLUME}\` volume (docs/security.md, pod identity), ` +
          `or pass podIdentity: "address" to trust names and addresses alone`,
      );
    }
    const claims = verifyToken(token, this.keys, now);
    const seen = isObject(claims["kubernetes.io"]) ? claims["kubernetes.io"] : {};
    const namespace = seen.namespace;
    const pod = isObject(seen.pod) ? seen.pod.name : undefined;
    if (namespace !== this.namespace || pod !== this.podName) {
      throw new UnverifiedPod(`the pod reached is ${namespace ?? "None"}/${pod ?? "None"} by its identity token, expected ${who}`);
    }
  }
}
