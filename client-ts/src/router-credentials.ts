// Per-session credentials for agent-sandbox's router, from the operator's issuer (langchain_k8s_client.router_credentials;
// the contract is agentsession_api.router_access, generated into generated/protocol.ts).
//
// In router mode, when the operator publishes an issuer (the ConfigMap agentsession-router-issuer), every request
// carries a token bound to its method and path on the session's Sandbox (by UID) and port. The client shows the
// issuer its own Kubernetes bearer token (the KubeConfig's); RBAC decides (`create agentsessions/connect`). The
// fixed paths (probe, execute, upload) come in one call and are kept until RENEW_MARGIN seconds before they
// expire; a download's path is new each time, so each download asks for its own.
import * as https from "node:https";
import * as k8s from "@kubernetes/client-node";
import { RouterAccessRefused } from "./errors.js";
import {
  EXECUTE_PATH,
  HEALTH_PATH,
  ISSUER_CA_KEY,
  ISSUER_CONFIGMAP,
  ISSUER_CONFIGMAP_NAMESPACE,
  ISSUER_URL_KEY,
  RENEW_MARGIN,
  TOKENS_PATH,
  UPLOAD_PATH,
} from "./generated/protocol.js";

export { RENEW_MARGIN };
export const FIXED: ReadonlyArray<readonly [string, string]> = [
  ["GET", HEALTH_PATH],
  ["POST", EXECUTE_PATH],
  ["POST", UPLOAD_PATH],
];
const ISSUER_TIMEOUT = 15_000;
export const NO_BEARER =
  "router credentials need a Kubernetes bearer token (a ServiceAccount's, a kubeconfig token or an exec plugin's); this KubeConfig authenticates otherwise (e.g. a client certificate)";

export interface IssuerLocation {
  url: string;
  ca: string;
}

export interface Grant {
  sandbox: string;
  sandboxUID: string;
  expires: number;
  token: string;
}

/** Where the operator publishes its issuer; null when it runs none (the router then gets no token). */
export async function publishedIssuer(kubeConfig: k8s.KubeConfig): Promise<IssuerLocation | null> {
  try {
    const cm = await kubeConfig
      .makeApiClient(k8s.CoreV1Api)
      .readNamespacedConfigMap({ name: ISSUER_CONFIGMAP, namespace: ISSUER_CONFIGMAP_NAMESPACE });
    const url = cm.data?.[ISSUER_URL_KEY];
    const ca = cm.data?.[ISSUER_CA_KEY];
    return url && ca ? { url: url.replace(/\/+$/, ""), ca } : null;
  } catch (err) {
    if (err instanceof k8s.ApiException && (err.code === 403 || err.code === 404)) return null;
    throw err;
  }
}

/** The KubeConfig's own bearer token (ServiceAccount, token or exec plugin); undefined for a client certificate. */
export async function bearerOf(kubeConfig: k8s.KubeConfig): Promise<string | undefined> {
  const options: https.RequestOptions = {};
  await kubeConfig.applyToHTTPSOptions(options);
  const auth = (options.headers as Record<string, string> | undefined)?.Authorization ?? "";
  return auth.toLowerCase().startsWith("bearer ") ? auth.slice(7).trim() : undefined;
}

export type Ask = (wanted: ReadonlyArray<readonly [string, string]>) => Promise<Grant[]>;

/** Tokens for one session's Sandbox on one port; `bearer` is asked for the caller's token at every issuer call
 * (a ServiceAccount's projected token rotates within the hour). */
export class RouterCredentials {
  private readonly grants = new Map<string, Grant>();
  private pending: Promise<unknown> = Promise.resolve();

  constructor(
    readonly issuer: IssuerLocation,
    private readonly bearer: () => Promise<string | undefined>,
    readonly namespace: string,
    readonly session: string,
    readonly port: number,
    private readonly clock: () => number = () => Date.now() / 1000,
    private readonly ask: Ask | undefined = undefined,
  ) {}

  private fresh(key: string): Grant | undefined {
    const grant = this.grants.get(key);
    return grant && grant.expires - this.clock() > RENEW_MARGIN ? grant : undefined;
  }

  /** The fixed paths' grant (and with it the Sandbox's name and UID the router routes by). */
  sandbox(): Promise<Grant> {
    return this.grant("GET", HEALTH_PATH);
  }

  /** The token for (method, path), asked for together with any fixed path that needs renewing (one call at a time). */
  grant(method: string, path: string): Promise<Grant> {
    const key = `${method.toUpperCase()} ${path}`;
    const hit = this.fresh(key);
    if (hit) return Promise.resolve(hit);
    const next = this.pending.then(async () => {
      const again = this.fresh(key);
      if (again) return again;
      const wanted: Array<readonly [string, string]> = [[method.toUpperCase(), path]];
      for (const [m, p] of FIXED) if (`${m} ${p}` !== key && !this.fresh(`${m} ${p}`)) wanted.push([m, p]);
      const got = await (this.ask ?? ((w) => this.post(w)))(wanted);
      wanted.forEach(([m, p], i) => {
        if (FIXED.some(([fm, fp]) => fm === m && fp === p)) this.grants.set(`${m} ${p}`, got[i]!);
      });
      return got[0]!;
    });
    this.pending = next.catch(() => undefined);
    return next;
  }

  private async post(wanted: ReadonlyArray<readonly [string, string]>): Promise<Grant[]> {
    const bearer = await this.bearer();
    if (!bearer) throw new RouterAccessRefused(NO_BEARER);
    const path = TOKENS_PATH.replace("{namespace}", encodeURIComponent(this.namespace)).replace("{name}", encodeURIComponent(this.session));
    const body = Buffer.from(JSON.stringify({ port: this.port, requests: wanted.map(([method, p]) => ({ method, path: p })) }));
    const where = `${this.namespace}/${this.session}`;
    return new Promise<Grant[]>((resolve, reject) => {
      const request = https.request(
        new URL(this.issuer.url + path),
        {
          method: "POST",
          ca: this.issuer.ca, // the published CA, nothing else
          timeout: ISSUER_TIMEOUT,
          headers: { Authorization: `Bearer ${bearer}`, "Content-Type": "application/json", "Content-Length": String(body.length) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            let answer: Record<string, unknown> = {};
            try {
              answer = JSON.parse(text) as Record<string, unknown>;
            } catch {
              /* not JSON: said below */
            }
            if (res.statusCode !== 200) {
              const message = typeof answer.message === "string" ? answer.message : text.slice(0, 200);
              reject(new RouterAccessRefused(`router credentials for ${where} refused (HTTP ${res.statusCode}): ${message}`, res.statusCode ?? 0));
              return;
            }
            const tokens = answer.tokens;
            if (!Array.isArray(tokens) || tokens.length !== wanted.length) {
              reject(new RouterAccessRefused(`the router credential issuer answered garbage: ${JSON.stringify(text.slice(0, 200))}`));
              return;
            }
            resolve(tokens.map((token) => ({ sandbox: String(answer.sandbox), sandboxUID: String(answer.sandboxUID), expires: Number(answer.expires), token: String(token) })));
          });
        },
      );
      request.on("timeout", () => request.destroy(new Error(`no answer in ${ISSUER_TIMEOUT / 1000} s`)));
      request.on("error", (err) => reject(new RouterAccessRefused(`the router credential issuer at ${this.issuer.url} failed: ${err.message}`)));
      request.end(body);
    });
  }
}
