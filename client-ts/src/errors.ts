// Typed errors, the same family as langchain_k8s_client.errors (names and meanings match).

/** Base class of every error raised by this package. */
export class SandboxError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** A session-level failure described by an AgentSession condition's reason and message. */
export class SessionError extends SandboxError {
  constructor(
    readonly reason: string,
    readonly detail = "",
  ) {
    super(detail ? `${reason}: ${detail}` : reason);
  }
}

/** The AgentSession reached phase Failed (terminal). */
export class SessionFailed extends SessionError {}
/** The AgentSession expired (phase Expired); its pod is gone. */
export class SessionExpired extends SessionError {}
/** The AgentSession did not become Ready before the deadline. */
export class SessionNotReady extends SessionError {}
/** No AgentSession with that name exists. */
export class SessionNotFound extends SessionError {}
/** Refused by a policy (admission, quota, template rules). */
export class PolicyViolation extends SessionError {}
/** The AgentSession exists with a different spec. */
export class SessionConflict extends SessionError {}

/** The pod's runtime could not be reached. `maybeDelivered` is false only when the request provably never
 * left (connection refused), so a command or write is never sent twice. */
export class TransportError extends SandboxError {
  constructor(
    message: string,
    readonly maybeDelivered = true,
  ) {
    super(message);
  }
}

/** The runtime answered something this client cannot read (a broken or hostile pod). */
export class MalformedResponse extends SandboxError {}

/** One answer of the pod crossed a bound (size or total time) and was cut off. */
export class ResponseLimitExceeded extends SandboxError {
  constructor(
    message: string,
    readonly limit: "max_bytes" | "slack_seconds",
    readonly value: number,
  ) {
    super(message);
  }
}
export class ResponseTooLarge extends ResponseLimitExceeded {}
export class ResponseTooSlow extends ResponseLimitExceeded {}

/** The runtime at the endpoint belongs to another pod than the session's status names: another name, or none
 * of the pod's own addresses holds an IP the API gave the session's pod (`expectedIPs`, status.podIPs). */
export class WrongPod extends SandboxError {
  constructor(
    readonly expected: string,
    readonly actual: string,
    readonly expectedIPs: readonly string[] = [],
    readonly actualAddresses: readonly string[] = [],
  ) {
    const where = expectedIPs.length ? ` at ${expectedIPs.join(", ")}` : "";
    const has = expectedIPs.length ? ` with addresses ${actualAddresses.join(", ") || "none"}` : "";
    super(`endpoint answers as pod '${actual}'${has}, expected the session's pod '${expected}'${where} (from the API)`);
  }
}

/** The runtime at the endpoint could not prove with its identity token that it is the session's pod
 * (`podIdentity`): nothing of the session was sent to it. */
export class UnverifiedPod extends WrongPod {
  constructor(message: string) {
    super("", "");
    this.message = message;
  }
}

/** The operator's issuer gave no router credentials for this session: the caller is not authenticated, RBAC does
 * not let it `create agentsessions/connect` on the session, or the session has no sandbox yet. `status` is the
 * issuer's HTTP status (401, 403, 404, 409; 0: it could not be reached). */
export class RouterAccessRefused extends SandboxError {
  constructor(
    message: string,
    readonly status = 0,
  ) {
    super(message);
  }
}
