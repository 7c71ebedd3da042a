"""The client's only Kubernetes API layer: AgentSession objects and nothing else.

It creates, reads, watches and deletes AgentSessions and patches one annotation (activity) on its own
session, and spec.suspend only when the caller asks (a fork with suspend_source). It never touches
SandboxClaims, Sandboxes or Pods, and keeps no lifecycle state: everything
comes from the session's status, which the operator publishes.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from pydantic import BaseModel

from agentsession_api import names, patterns, phases
from agentsession_api.activity import format_activity
from agentsession_api.phases import Phase
from agentsession_api.types import AgentSessionSpec, AgentSessionStatus, Condition, EnvVar, ForkFrom, WarmPoolRef
from langchain_k8s_client.errors import (
    PolicyViolation,
    SessionConflict,
    SessionExpired,
    SessionFailed,
    SessionNotFound,
    SessionNotReady,
)

GROUP, VERSION, PLURAL = names.GROUP, names.VERSION, names.SESSION_PLURAL
log = logging.getLogger(__name__)


def _alias(model: type[BaseModel], field_name: str) -> str:
    # A KeyError here means the api package renamed or dropped the field: the client must follow.
    info = model.model_fields[field_name]
    return info.alias or field_name


@dataclass(frozen=True)
class SpecKeys:
    """The wire names of the spec fields the client sets, read from `agentsession_api.types`."""

    spec: Mapping[str, str]
    ref_name: str
    env_name: str
    env_value: str
    fork_name: str


_SPEC_FIELDS = (
    "warm_pool_ref",
    "ttl",
    "idle_timeout",
    "idle_action",
    "env",
    "labels",
    "pod_labels",
    "pod_annotations",
    "volume_claim_templates",
    "fork_from",
)


@functools.cache
def spec_keys() -> SpecKeys:
    """The one source of the spec's names: the pydantic types that also generate the CRD."""
    return SpecKeys(
        spec={name: _alias(AgentSessionSpec, name) for name in _SPEC_FIELDS},
        ref_name=_alias(WarmPoolRef, "name"),
        env_name=_alias(EnvVar, "name"),
        env_value=_alias(EnvVar, "value"),
        fork_name=_alias(ForkFrom, "name"),
    )


@dataclass(frozen=True)
class SessionSpec:
    """What the caller asks for when a session is created (also what an attach is compared with)."""

    warm_pool: str | None = None
    ttl: str | None = None
    idle_timeout: str | None = None
    idle_action: str | None = None
    env: Mapping[str, str] | None = None
    labels: Mapping[str, str] | None = None
    pod_labels: Mapping[str, str] | None = None
    pod_annotations: Mapping[str, str] | None = None
    volume_claim_templates: list[dict[str, Any]] | None = None
    session_labels: Mapping[str, str] | None = None  # metadata.labels of the AgentSession itself
    fork_from: str | None = None  # spec.forkFrom.name: start with copies of that session's volumes

    def to_spec(self) -> dict[str, Any]:
        """spec of the AgentSession, every key spelled by the api package's types (`spec_keys`)."""
        keys = spec_keys()
        spec: dict[str, Any] = {}
        if self.warm_pool:
            spec[keys.spec["warm_pool_ref"]] = {keys.ref_name: self.warm_pool}
        for field_name, value in (
            ("ttl", self.ttl),
            ("idle_timeout", self.idle_timeout),
            ("idle_action", self.idle_action),
        ):
            if value is not None:
                spec[keys.spec[field_name]] = value
        if self.env:
            spec[keys.spec["env"]] = [{keys.env_name: k, keys.env_value: v} for k, v in self.env.items()]
        for field_name, mapping in (
            ("labels", self.labels),
            ("pod_labels", self.pod_labels),
            ("pod_annotations", self.pod_annotations),
        ):
            if mapping:
                spec[keys.spec[field_name]] = dict(mapping)
        if self.volume_claim_templates:
            spec[keys.spec["volume_claim_templates"]] = list(self.volume_claim_templates)
        if self.fork_from:
            spec[keys.spec["fork_from"]] = {keys.fork_name: self.fork_from}
        return spec

    def conflicts(self, existing: Mapping[str, Any]) -> list[str]:
        """Fields given here that the existing session's spec contradicts (unset fields never conflict)."""
        wanted = self.to_spec()
        have = existing.get("spec") or {}
        out = []
        for key, value in wanted.items():
            if key == "env":
                current = {e["name"]: e.get("value") for e in have.get("env") or []}
                if current != dict(self.env or {}):
                    out.append(f"spec.env is {sorted(current)} on the cluster, {sorted(self.env or {})} here")
            elif have.get(key) != value:
                out.append(f"spec.{key} is {have.get(key)!r} on the cluster, {value!r} here")
        return out


@dataclass
class SessionView:
    """What the status says about reaching the pod."""

    name: str
    namespace: str
    uid: str
    phase: str | None
    pod_name: str | None
    pod_ips: list[str]
    sandbox_name: str | None
    claim_name: str | None
    service_fqdn: str | None
    idle_timeout: str | None
    conditions: list[Condition] = field(default_factory=list)
    suspend_requested: bool = False

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> SessionView:
        # The status is read through the API's own model: a renamed field fails here, not silently later.
        status = AgentSessionStatus.model_validate(body.get("status") or {})
        spec = body.get("spec") or {}
        return cls(
            name=body["metadata"]["name"],
            namespace=body["metadata"]["namespace"],
            uid=body["metadata"]["uid"],
            phase=status.phase,
            pod_name=status.pod_name,
            pod_ips=list(status.pod_ips or []),
            sandbox_name=status.sandbox_name,
            claim_name=status.claim_name,
            service_fqdn=status.service_fqdn,
            idle_timeout=(status.resolved.idle_timeout if status.resolved else None) or spec.get("idleTimeout"),
            conditions=list(status.conditions or []),
            suspend_requested=bool(spec.get("suspend")),
        )

    def condition(self, ctype: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == ctype), None)

    @property
    def ready(self) -> bool:
        return self.phase == Phase.READY and bool(self.pod_ips) and bool(self.pod_name)

    @property
    def finished(self) -> bool:
        """Expired or Failed: waiting will not make it Ready."""
        return phases.is_terminal(self.phase)


def raise_for_terminal(view: SessionView) -> None:
    """A typed error for a session that will never become Ready by waiting."""
    ready = view.condition(phases.COND_READY)
    who = f"AgentSession {view.namespace}/{view.name}: "
    if view.phase == Phase.EXPIRED:
        cond = view.condition(phases.COND_EXPIRED) or ready
        raise SessionExpired(
            cond.reason if cond else "Expired", who + (cond.message if cond else "the session has ended")
        )
    if view.phase == Phase.FAILED:
        policy = view.condition(phases.COND_POLICY_COMPLIANT)
        if policy is not None and policy.status == "False":
            raise PolicyViolation(policy.reason, who + policy.message)
        cond = view.condition(phases.COND_FAILED) or ready
        raise SessionFailed(cond.reason if cond else "Failed", who + (cond.message if cond else ""))


def load_api_client(api_client: client.ApiClient | None = None) -> client.ApiClient:
    if api_client is not None:
        return api_client
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


@dataclass(frozen=True)
class WaitProgress:
    """One step of a long wait (Ready, a resume, a phase): what the session's status says now.

    Reported when the phase or the Ready condition's reason or message changes, the first view included."""

    namespace: str
    name: str
    phase: str
    """The status's phase, "Pending" before the operator wrote one."""
    reason: str
    """The Ready condition's reason ("" when there is none yet)."""
    message: str
    elapsed: float
    """Seconds since the wait began."""

    @classmethod
    def of(cls, view: SessionView, elapsed: float) -> WaitProgress:
        ready = view.condition(phases.COND_READY)
        return cls(
            view.namespace,
            view.name,
            view.phase or Phase.PENDING,
            (ready.reason or "") if ready else "",
            (ready.message or "") if ready else "",
            elapsed,
        )

    def same_step(self, other: WaitProgress | None) -> bool:
        return other is not None and (self.phase, self.reason, self.message) == (
            other.phase,
            other.reason,
            other.message,
        )

    def __str__(self) -> str:
        said = f" ({self.reason}: {self.message})" if self.reason and self.message else ""
        said = said or (f" ({self.reason})" if self.reason else "")
        return f"agentsession/{self.name}: {self.phase}{said} after {self.elapsed:.0f} s"


ProgressCallback = Callable[[WaitProgress], None]
"""Called with each new step of a wait, from the thread that waits (a worker thread for the async API):
keep it quick. Every step is also logged at INFO on the `langchain_k8s_client.sessions` logger."""


class ProgressReporter:
    """Reports a wait's steps once each: to the logger, and to the caller's callback when given."""

    def __init__(self, callback: ProgressCallback | None = None) -> None:
        self.callback = callback
        self.started = time.monotonic()
        self.last: WaitProgress | None = None

    def see(self, view: SessionView) -> None:
        step = WaitProgress.of(view, time.monotonic() - self.started)
        if step.same_step(self.last):
            return
        self.last = step
        log.info("%s", step)
        if self.callback is not None:
            self.callback(step)


class SessionStore:
    """AgentSession CRUD, the Ready wait (one watch) and the activity annotation."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api_client = load_api_client(api_client)
        self.api = client.CustomObjectsApi(self.api_client)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self.api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, namespace: str, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items())
        result = self.api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, label_selector=selector)
        return list(result.get("items") or [])  # an empty list may answer `items: null`

    def get_or_create(self, namespace: str, name: str, spec: SessionSpec) -> tuple[dict[str, Any], bool]:
        """The session, and whether this call created it. An existing one must not contradict `spec`."""
        if not patterns.is_dns1123_label(name):
            raise ValueError(
                f"session name {name!r} must be a DNS label: lowercase letters, digits and '-', "
                "at most 63 characters, starting and ending with a letter or digit"
            )
        existing = self.get(namespace, name)
        if existing is None:
            body = {
                "apiVersion": names.API_VERSION,
                "kind": names.SESSION_KIND,
                "metadata": {"name": name, "namespace": namespace, "labels": dict(spec.session_labels or {})},
                "spec": spec.to_spec(),
            }
            try:
                created = self.api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
                return dict(created), True
            except ApiException as exc:
                if exc.status == 409:  # another process created it first: attach to that one
                    existing = self.get(namespace, name)
                elif exc.status in (400, 403, 422):
                    raise _refusal(name, exc) from exc
                else:
                    raise
        if existing is None:
            raise SessionNotFound("NotFound", f"AgentSession {namespace}/{name} vanished while attaching")
        conflicts = spec.conflicts(existing)
        if conflicts:
            raise SessionConflict(
                "SpecMismatch", f"AgentSession {namespace}/{name} exists with another spec: " + "; ".join(conflicts)
            )
        return existing, False

    def require(self, namespace: str, name: str) -> dict[str, Any]:
        body = self.get(namespace, name)
        if body is None:
            raise SessionNotFound("NotFound", f"AgentSession {namespace}/{name} does not exist")
        return body

    def wait_ready(
        self,
        namespace: str,
        name: str,
        timeout: float,
        on_progress: ProgressCallback | None = None,
        body: dict[str, Any] | None = None,
    ) -> SessionView:
        """Watch the session until it is Ready (with a pod IP); typed errors for terminal states. Each new
        step (phase, Ready reason or message) is logged and given to `on_progress`. `body`: the session as
        the caller just read it (no GET first)."""

        def not_ready(view: SessionView) -> Exception:
            ready = view.condition(phases.COND_READY)
            # No phase yet: the operator writes a new session's first status when it is Ready or has
            # provisioned for a while, or it has not seen the session (not running, or far behind).
            said = (ready.message if ready else "") or view.phase or "no status from the operator yet"
            return SessionNotReady(
                ready.reason if ready else view.phase or Phase.PENDING, f"not Ready after {timeout:.0f} s: {said}"
            )

        return self._watch_until(namespace, name, timeout, lambda view: view.ready, not_ready, on_progress, body)

    def set_suspend(self, namespace: str, name: str, value: bool) -> None:
        """spec.suspend (a merge patch of that one field)."""
        self.api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": {"suspend": value}})

    def wait_phase(
        self, namespace: str, name: str, phase: str, timeout: float, on_progress: ProgressCallback | None = None
    ) -> SessionView:
        """Watch the session until it reaches `phase` (typed errors when it finishes instead)."""
        return self._watch_until(
            namespace,
            name,
            timeout,
            lambda view: view.phase == phase,
            lambda view: SessionNotReady(view.phase or Phase.PENDING, f"not {phase} after {timeout:.0f} s"),
            on_progress,
        )

    def _watch_until(
        self,
        namespace: str,
        name: str,
        timeout: float,
        done: Callable[[SessionView], bool],
        timed_out: Callable[[SessionView], Exception],
        on_progress: ProgressCallback | None = None,
        body: dict[str, Any] | None = None,
    ) -> SessionView:
        """One GET (unless given `body`), then a watch of this one session from its resourceVersion until
        `done` (no polling: the change is seen when the API server sends it); typed errors for terminal
        states, `timed_out`'s at the deadline."""
        deadline = time.monotonic() + timeout
        progress = ProgressReporter(on_progress)
        body = body if body is not None else self.require(namespace, name)
        view = SessionView.of(body)
        while True:
            progress.see(view)
            if done(view):
                return view
            raise_for_terminal(view)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise timed_out(view)
            w = watch.Watch()
            try:
                for event in w.stream(
                    self.api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    field_selector=f"metadata.name={name}",
                    resource_version=body["metadata"]["resourceVersion"],
                    timeout_seconds=max(1, int(remaining)),
                ):
                    if event["type"] == "DELETED":
                        raise SessionNotFound("Deleted", f"AgentSession {namespace}/{name} was deleted")
                    body = event["object"]
                    view = SessionView.of(body)
                    if done(view) or view.finished:
                        break
                    progress.see(view)
            except ApiException as exc:
                if exc.status != 410:
                    raise
                body = self.require(namespace, name)  # history expired: start again from now
                view = SessionView.of(body)
            finally:
                w.stop()

    def report_activity(self, namespace: str, name: str, busy_seconds: float = 0) -> dict[str, Any] | None:
        """One merge patch of one annotation: `"<now> busy=<seconds>"`. The operator times it itself.

        Returns the session as the PATCH answered it (its status included), or None if the answer was not an
        object: the caller learns the phase at no extra request."""
        value = format_activity(dt.datetime.now(dt.UTC), busy_seconds)
        patch = {"metadata": {"annotations": {names.ANNOTATION_ACTIVITY: value}}}
        answer = self.api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch)
        return answer if isinstance(answer, dict) else None

    def delete(self, namespace: str, name: str, uid: str | None = None) -> bool:
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
        try:
            self.api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body=body)
            return True
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise


def _refusal(name: str, exc: ApiException) -> Exception:
    """Admission refusals become PolicyViolation (policy webhook) or ValueError (schema), with the message."""
    import json

    try:
        message = json.loads(exc.body or "{}").get("message") or str(exc.reason)
    except ValueError:
        message = str(exc.reason)
    if "AgentSessionPolicy" in message:
        return PolicyViolation("AdmissionRefused", message)
    return ValueError(f"AgentSession {name} refused by the API server: {message}")
