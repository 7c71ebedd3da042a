"""A deepagents sandbox backend on Kubernetes AgentSessions.

`AgentSessionSandbox` is the backend; `SessionManager` gives one per LangGraph thread; `PodSandbox` is the
pod side alone (a runtime endpoint you already have).
"""

from importlib import metadata as _metadata

from .backend import AgentSessionSandbox
from .errors import (
    MalformedResponse,
    PolicyViolation,
    ResponseLimitExceeded,
    ResponseTooLarge,
    ResponseTooSlow,
    RouterAccessRefused,
    RouterUnreachable,
    SandboxError,
    SessionConflict,
    SessionExpired,
    SessionFailed,
    SessionNotFound,
    SessionNotReady,
    TransportError,
    UnverifiedPod,
    WrongPod,
)
from .manager import SessionManager
from .pod_sandbox import PodSandbox
from .sessions import WaitProgress
from .transport import PodEndpoint, ResponseLimits, RetryPolicy, RuntimeTransport

try:
    __version__ = _metadata.version("langchain-k8s-client")  # pyproject.toml's: the one place it is written
except _metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"

__all__ = [
    "AgentSessionSandbox",
    "MalformedResponse",
    "PodEndpoint",
    "PodSandbox",
    "PolicyViolation",
    "ResponseLimitExceeded",
    "ResponseLimits",
    "ResponseTooLarge",
    "ResponseTooSlow",
    "RetryPolicy",
    "RouterAccessRefused",
    "RouterUnreachable",
    "RuntimeTransport",
    "SandboxError",
    "SessionConflict",
    "SessionExpired",
    "SessionFailed",
    "SessionManager",
    "SessionNotFound",
    "SessionNotReady",
    "TransportError",
    "UnverifiedPod",
    "WaitProgress",
    "WrongPod",
]
