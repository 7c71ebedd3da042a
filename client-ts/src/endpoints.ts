// A session's status turned into a PodEndpoint (langchain_k8s_client.endpoints): the pod IP on the runtime's
// port by default, or the sandbox router's URL plus the X-Sandbox-* headers it routes by (the router mode of
// the Python client, SandboxDirectConnectionConfig). The Python client's tunnel and gateway modes only find
// the router's URL (kubectl port-forward, a Gateway's address); here the caller gives the URL they found.
//
// Whichever the mode, the endpoint names the pod the status names and, unless `podIdentity: "address"`, the
// identity token that pod must show (identity.ts): a router or a stale IP that leads elsewhere gets nothing.
//
// Router mode, when the operator publishes a credential issuer: the router is told the Sandbox by name and UID
// (never the pod IP, which no token signs) and each request carries its own token (router-credentials.ts).
import type * as k8s from "@kubernetes/client-node";
import { ClusterKeys, PodIdentity, type PodIdentityMode } from "./identity.js";
import type { SessionView } from "./sessions.js";
import type { PodEndpoint } from "./transport.js";

import { RouterAccessRefused } from "./errors.js";
import { RUNTIME_PORT, SANDBOX_UID_HEADER } from "./generated/protocol.js";
import { bearerOf, NO_BEARER, publishedIssuer, RouterCredentials } from "./router-credentials.js";

export { RUNTIME_PORT };

export type Connection =
  | { mode: "podIP"; serverPort?: number }
  | { mode: "router"; url: string; serverPort?: number; extraHeaders?: Record<string, string> };

export function routerHeaders(view: SessionView, port: number): Record<string, string> {
  const headers: Record<string, string> = {
    "X-Sandbox-ID": view.sandboxName || view.podName || "",
    "X-Sandbox-Namespace": view.namespace,
    "X-Sandbox-Port": String(port),
  };
  if (view.podIPs.length) headers["X-Sandbox-Pod-IP"] = view.podIPs[0]!;
  return headers;
}

export function checkConnection(connection: Connection | undefined): void {
  if (connection === undefined || connection.mode === "podIP") return;
  if (connection.mode !== "router") throw new RangeError(`connection.mode must be 'podIP' or 'router', got '${(connection as { mode: unknown }).mode}'`);
  let url: URL;
  try {
    url = new URL(connection.url);
  } catch {
    throw new RangeError(`connection.url '${connection.url}' is not a URL: give the router's, e.g. http://sandbox-router-svc.agent-sandbox-system:8080`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new RangeError(`connection.url must be http or https, got ${url.protocol}`);
}

/** Where the runtime of the session in `view` (Ready) answers, and whom it must say it is: the status's pod
 * name and IPs, in every mode (through the router too, which picks its target from headers). */
export function endpointFor(view: SessionView, connection?: Connection): PodEndpoint {
  const port = connection?.serverPort ?? RUNTIME_PORT;
  if (connection === undefined || connection.mode === "podIP") {
    const ip = view.podIPs[0]!;
    const host = ip.includes(":") ? `[${ip}]` : ip;
    return { baseUrl: `http://${host}:${port}`, expectedHostname: view.podName ?? undefined, expectedIPs: [...view.podIPs] };
  }
  const headers = { ...routerHeaders(view, port), ...(connection.extraHeaders ?? {}) };
  return { baseUrl: connection.url, headers, expectedHostname: view.podName ?? undefined, expectedIPs: [...view.podIPs] };
}

/** endpointFor, plus the identity the pod must prove unless `podIdentity` is "address": the session's namespace
 * and pod, and the cluster's keys (fetched through `kubeConfig`, cached; UnverifiedPod when they cannot be read). */
export async function resolveEndpoint(
  view: SessionView,
  o: { connection?: Connection; podIdentity?: PodIdentityMode; kubeConfig: k8s.KubeConfig },
): Promise<PodEndpoint> {
  let endpoint = endpointFor(view, o.connection);
  if (o.connection?.mode === "router") endpoint = await withRouterCredentials(endpoint, view, o.kubeConfig);
  if (o.podIdentity === "address") return endpoint;
  return { ...endpoint, identity: new PodIdentity(view.namespace, view.podName ?? "", await ClusterKeys.of(o.kubeConfig)) };
}

/** The router endpoint with fresh per-session credentials (a new pod may be a new Sandbox), when the operator
 * publishes an issuer; as it was otherwise. */
async function withRouterCredentials(endpoint: PodEndpoint, view: SessionView, kubeConfig: k8s.KubeConfig): Promise<PodEndpoint> {
  const issuer = await publishedIssuer(kubeConfig);
  if (!issuer) return endpoint;
  if (!(await bearerOf(kubeConfig))) throw new RouterAccessRefused(NO_BEARER);
  const port = Number(endpoint.headers?.["X-Sandbox-Port"] ?? RUNTIME_PORT);
  const credentials = new RouterCredentials(issuer, () => bearerOf(kubeConfig), view.namespace, view.name, port);
  const grant = await credentials.sandbox();
  const headers: Record<string, string> = { ...(endpoint.headers ?? {}), "X-Sandbox-ID": grant.sandbox, [SANDBOX_UID_HEADER]: grant.sandboxUID };
  delete headers["X-Sandbox-Pod-IP"];
  return { ...endpoint, headers, credentials };
}
