// The cluster's ServiceAccount token signer, as far as a client sees it (the twin of ClusterSigner in
// tests/unit/client/fakes.py): pod identity tokens signed with a key made here, and a local stand-in for the API
// server that serves the keys at /openid/v1/jwks, with a KubeConfig pointing at it. Outside test/ so
// `node --test dist/test/` does not run it as a test file.
import { generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import * as k8s from "@kubernetes/client-node";
import { POD_IDENTITY_AUDIENCE } from "../src/generated/contract.js";

const b64 = (data: string | Buffer) => Buffer.from(data).toString("base64url");

export interface ApiServer {
  kubeConfig: k8s.KubeConfig;
  close(): void;
}

/** A local HTTP server playing the API server (`answer` gets every request) and a KubeConfig for it. */
export async function startApiServer(answer: (req: http.IncomingMessage, res: http.ServerResponse) => void): Promise<ApiServer> {
  const server = http.createServer(answer);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const kubeConfig = new k8s.KubeConfig();
  kubeConfig.loadFromOptions({
    // client-node speaks plain HTTP only with skipTLSVerify (a test stand-in: no TLS here).
    clusters: [{ name: "c", server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true }],
    users: [{ name: "u", token: "the-clients-token" }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  return { kubeConfig, close: () => server.close() };
}

export interface TokenOptions {
  audience?: string;
  /** Seconds from `issued`. */
  lifetime?: number;
  /** Seconds since the epoch (default now). */
  issued?: number;
  /** Claims added or replaced. */
  extra?: Record<string, unknown>;
  /** The header's alg (default the key's own). */
  alg?: string;
}

export class ClusterSigner {
  readonly privateKey: KeyObject;
  readonly publicKey: KeyObject;
  /** Requests the API server stand-in answered at /openid/v1/jwks. */
  jwksRequests = 0;

  constructor(
    readonly kind: "EC" | "RSA" = "EC",
    readonly kid = "k1",
  ) {
    const pair = kind === "EC" ? generateKeyPairSync("ec", { namedCurve: "P-256" }) : generateKeyPairSync("rsa", { modulusLength: 2048 });
    this.privateKey = pair.privateKey;
    this.publicKey = pair.publicKey;
  }

  get alg(): string {
    return this.kind === "EC" ? "ES256" : "RS256";
  }

  jwks(): { keys: Array<Record<string, unknown>> } {
    return { keys: [{ ...this.publicKey.export({ format: "jwk" }), kid: this.kid, alg: this.alg, use: "sig" }] };
  }

  token(namespace: string, pod: string, o: TokenOptions = {}): string {
    const now = o.issued ?? Date.now() / 1000;
    const header = { alg: o.alg ?? this.alg, kid: this.kid };
    const claims = {
      aud: [o.audience ?? POD_IDENTITY_AUDIENCE],
      iss: "https://kubernetes.default.svc.cluster.local",
      iat: Math.floor(now),
      nbf: Math.floor(now),
      exp: Math.floor(now + (o.lifetime ?? 3600)),
      sub: `system:serviceaccount:${namespace}:default`,
      "kubernetes.io": { namespace, pod: { name: pod, uid: "3f1c" }, serviceaccount: { name: "default", uid: "9a2b" } },
      ...o.extra,
    };
    const input = `${b64(JSON.stringify(header))}.${b64(JSON.stringify(claims))}`;
    const key = this.kind === "EC" ? { key: this.privateKey, dsaEncoding: "ieee-p1363" as const } : this.privateKey;
    return `${input}.${b64(sign("sha256", Buffer.from(input), key))}`;
  }

  /** The API server stand-in, serving this signer's keys (as the API server does: application/jwk-set+json). */
  serve(): Promise<ApiServer> {
    return startApiServer((req, res) => {
      if (req.url !== "/openid/v1/jwks") return void res.writeHead(404).end();
      if (req.headers.authorization !== "Bearer the-clients-token") return void res.writeHead(401).end(); // the client's own credentials
      this.jwksRequests += 1;
      res.writeHead(200, { "Content-Type": "application/jwk-set+json" }).end(JSON.stringify(this.jwks()));
    });
  }
}
