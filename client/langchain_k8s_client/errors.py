"""Typed exceptions of the client library.

`SandboxError` is the base of everything raised here. The session-level errors
(`SessionFailed` ... `SessionConflict`) carry the `reason`/`message` pair of the
AgentSession condition that caused them, so the Kubernetes side can raise them
with what the operator published. The pod-side errors (`TransportError`,
`WrongPod`) are raised by the transport to the sandbox runtime.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class of every error raised by `langchain_k8s_client`."""


class _SessionError(SandboxError):
    """A session-level failure described by a condition `reason` and `message`."""

    def __init__(self, reason: str, message: str = "") -> None:
        self.reason = reason
        self.message = message
        super().__init__(f"{reason}: {message}" if message else reason)


class SessionFailed(_SessionError):
    """The AgentSession reached phase Failed (terminal)."""


class SessionExpired(_SessionError):
    """The AgentSession expired (phase Expired); its pod is gone."""


class SessionNotReady(_SessionError):
    """The AgentSession did not become Ready before the deadline."""


class SessionNotFound(_SessionError):
    """No AgentSession with that name exists."""


class PolicyViolation(_SessionError):
    """The request was refused by a policy (admission, quota, template rules)."""


class SessionConflict(_SessionError):
    """The AgentSession exists with a different spec or owner."""


class TransportError(SandboxError):
    """The pod's runtime could not be reached or answered garbage.

    `maybe_delivered` is False only when the request provably never reached the
    runtime (the TCP connection was refused or timed out), so a caller knows
    whether a non-idempotent request might have run. The library itself never
    re-sends a command or a write after a TransportError.
    """

    def __init__(self, message: str, *, maybe_delivered: bool = True) -> None:
        super().__init__(message)
        self.maybe_delivered = maybe_delivered


class RouterUnreachable(TransportError):
    """The connection mode's way to the sandbox router failed before any request was sent: the tunnel's
    `kubectl port-forward` died, or the Gateway has no address. Nothing reached the runtime."""

    def __init__(self, mode: str, cause: BaseException) -> None:
        hint = {
            "tunnel": "the tunnel forwards to svc/sandbox-router-svc in agent-sandbox-system: deploy the sandbox "
            "router there, or choose another connection mode",
            "gateway": "the Gateway must publish an address in its status",
        }.get(mode, "check the router URL")
        super().__init__(f"{mode} connection to the sandbox router failed: {cause}; {hint}", maybe_delivered=False)
        self.mode = mode


class RouterAccessRefused(SandboxError):
    """The operator's issuer gave no router credentials for this session: the caller is not authenticated, RBAC
    does not let it `create agentsessions/connect` on the session, or the session has no sandbox yet.
    `status` is the issuer's HTTP status (401, 403, 404, 409; 0: it could not be reached)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class MalformedResponse(SandboxError):
    """The pod's runtime answered something this client cannot read: not the JSON or protocol lines it
    expects, a wrong type, a truncated record, a staged file name that leaves the staging directory.
    A broken or hostile pod; nothing in the answer was used."""


class ResponseLimitExceeded(SandboxError):
    """One answer of the pod crossed a bound of `ResponseLimits` and was cut off.

    `limit` names the bound ("max_bytes" or "slack_seconds"), `value` is its setting. Raised for a pod that
    answers too much or too slowly (a hostile one trickling bytes defeats a per-read timeout); the request is
    not sent again. A command may have run.
    """

    def __init__(self, message: str, *, limit: str, value: float) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value


class ResponseTooLarge(ResponseLimitExceeded):
    """The answer was larger than `ResponseLimits.max_bytes`."""


class ResponseTooSlow(ResponseLimitExceeded):
    """The answer took longer in total than the request's read timeout plus `ResponseLimits.slack_seconds`."""


class WrongPod(SandboxError):
    """The runtime at the endpoint belongs to another pod than expected."""

    def __init__(
        self, expected: str, actual: str, expected_ips: tuple[str, ...] = (), actual_addresses: tuple[str, ...] = ()
    ) -> None:
        self.expected = expected
        self.actual = actual
        self.expected_ips = expected_ips
        self.actual_addresses = actual_addresses
        where = f" at {', '.join(expected_ips)}" if expected_ips else ""
        has = f" with addresses {', '.join(actual_addresses) or 'none'}" if expected_ips else ""
        super().__init__(
            f"endpoint answers as pod {actual!r}{has}, expected the session's pod {expected!r}{where} (from the API)"
        )


class UnverifiedPod(WrongPod):
    """The runtime at the endpoint could not prove with its identity token that it is the session's pod
    (`pod_identity`): nothing of the session was sent to it."""

    def __init__(self, message: str) -> None:
        SandboxError.__init__(self, message)
        self.expected = self.actual = ""
        self.expected_ips = self.actual_addresses = ()
