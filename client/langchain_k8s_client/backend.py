"""`AgentSessionSandbox`: the deepagents backend over an AgentSession.

Creating one creates the AgentSession when it is absent, or attaches to it when present (any process,
any replica: the state lives in the cluster). The first operation waits for the session to be Ready
(one watch), then talks to the pod the status names; when the pod changes (resume, replacement), the
session is read again and the runtime's hostname is checked before anything runs.

It is a deepagents `BaseSandbox` (nothing in between) that holds a `PodSandbox`, `pod`, built with this
session's hooks (where the pod is now, the activity reports), and delegates every operation to it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, overload

from deepagents.backends.protocol import (
    DeleteResult,
    EditResult,
    ExecuteOffloadResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from deepagents.backends.sandbox import BaseSandbox

from agentsession_api.phases import IdleAction, Phase
from langchain_k8s_client.activity import ActivityThrottle, interval_for
from langchain_k8s_client.durations import normalize
from langchain_k8s_client.endpoints import EndpointResolver
from langchain_k8s_client.errors import SessionNotReady
from langchain_k8s_client.pod_identity import PodIdentityMode
from langchain_k8s_client.pod_sandbox import PodSandbox
from langchain_k8s_client.probe import RuntimeInfo
from langchain_k8s_client.sessions import (
    ProgressCallback,
    SessionSpec,
    SessionStore,
    SessionView,
    raise_for_terminal,
)
from langchain_k8s_client.transport import PodEndpoint, RuntimeTransport

if TYPE_CHECKING:
    from langchain_k8s_client.endpoints import Connection

log = logging.getLogger(__name__)

# Never contacted: the transport is marked stale at once, so the first operation resolves the real one.
_UNRESOLVED = PodEndpoint("http://unresolved.invalid")


class AgentSessionSandbox(BaseSandbox):
    """A deepagents `BaseSandbox` whose sandbox is the pod of an AgentSession: its `pod` (a `PodSandbox`)
    does every operation.

    Args:
        name: the AgentSession (its `id` in deepagents); created if absent, attached if present.
        namespace: where it lives.
        warm_pool, ttl, idle_timeout, idle_action, env, labels, pod_labels, pod_annotations,
        volume_claim_templates, session_labels: the spec (and metadata labels) used when creating;
            when attaching, any of them that contradicts the existing spec raises `SessionConflict`.
            Durations are Go-style strings ("2h", "15m") or seconds. env or volumes force a cold start.
        fork_from: create the session as a fork of that session (spec.forkFrom): its volumes start as
            copies of the source's; see `fork()`.
        connection: a k8s-agent-sandbox connection config (default: the pod IP,
            `SandboxInClusterConnectionConfig`).
        pod_identity: "token" (default): before it is sent anything, the pod must show the identity token its
            template mounts (`agentsession_api.names.POD_IDENTITY_VOLUME`), signed by the cluster and naming
            the session's namespace and pod; else `UnverifiedPod`. "address": trust the pod's name and
            addresses alone (a template without that volume; a namesake at a reused IP is not told apart).
        ready_timeout: seconds to wait for Ready before `SessionNotReady`.
        on_progress: called with a `WaitProgress` at each new step of a wait for Ready (the first
            operation's, a resume's, `wait_ready`'s): phase, the Ready condition's reason and message, and
            the seconds waited. Steps are logged at INFO on `langchain_k8s_client.sessions` either way.
        keep: as a context manager, keep a session this object created (default: delete it on exit).
        api_client: a `kubernetes.client.ApiClient` (default: in-cluster config, else kubeconfig).
        **options: the pod-side options of `PodSandbox` (max_output_size, command_timeout,
            allow_prefixes, virtual_mode, root_dir, working_dir, enable_capture_offload, retry,
            response_limits).
    """

    def __init__(
        self,
        name: str,
        namespace: str = "default",
        *,
        warm_pool: str | None = None,
        ttl: str | int | None = None,
        idle_timeout: str | int | None = None,
        idle_action: str | None = None,
        env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        pod_labels: Mapping[str, str] | None = None,
        pod_annotations: Mapping[str, str] | None = None,
        volume_claim_templates: list[dict[str, Any]] | None = None,
        session_labels: Mapping[str, str] | None = None,
        fork_from: str | None = None,
        connection: Connection | None = None,
        pod_identity: PodIdentityMode = "token",
        ready_timeout: float = 180,
        on_progress: ProgressCallback | None = None,
        keep: bool = False,
        api_client: Any = None,
        **options: Any,
    ) -> None:
        if idle_action is not None and idle_action not in tuple(IdleAction):
            raise ValueError(f"idle_action must be one of {', '.join(map(str, IdleAction))}, got {idle_action!r}")
        spec = SessionSpec(
            warm_pool=warm_pool,
            ttl=normalize(ttl),
            idle_timeout=normalize(idle_timeout),
            idle_action=idle_action,
            env=env,
            labels=labels,
            pod_labels=pod_labels,
            pod_annotations=pod_annotations,
            volume_claim_templates=volume_claim_templates,
            session_labels=session_labels,
            fork_from=fork_from,
        )
        self.namespace = namespace
        self.ready_timeout = ready_timeout
        self.on_progress = on_progress
        self.keep = keep
        self._store = SessionStore(api_client)
        body, self.created = self._store.get_or_create(namespace, name, spec)
        self.uid: str = body["metadata"]["uid"]
        raise_for_terminal(SessionView.of(body))
        self._throttle = ActivityThrottle(interval_for(SessionView.of(body).idle_timeout))
        self._resolver = EndpointResolver(connection, namespace, self._store.api_client, pod_identity)
        self.pod = PodSandbox(
            _UNRESOLVED,
            sandbox_id=name,
            resolve_endpoint=self._resolve_endpoint,
            on_activity=self._report_activity,
            aon_activity=self._areport_activity,
            **options,
        )
        self.pod.transport.mark_stale()

    # ---- the session side --------------------------------------------------------------------
    @property
    def session(self) -> SessionView:
        """The session as the cluster has it now (one GET)."""
        return SessionView.of(self._store.require(self.namespace, self.id))

    def _resolve_endpoint(self) -> PodEndpoint:
        read = self._store.require(self.namespace, self.id)
        body: dict[str, Any] | None = read
        view = SessionView.of(read)
        if view.phase == Phase.SUSPENDED:
            if view.suspend_requested:
                raise SessionNotReady(
                    "Suspended",
                    f"AgentSession {self.namespace}/{self.id} is suspended by spec.suspend=true; set it to false "
                    "to run it again",
                )
            # Idle-suspended: activity is what wakes it (keeping the busy window of the call in flight).
            self._send_activity(self._throttle.wake())
            body = None  # changed since: the wait reads it again
        view = self._store.wait_ready(self.namespace, self.id, self.ready_timeout, self.on_progress, body)
        self._throttle.interval = interval_for(view.idle_timeout)
        return self._resolver.resolve(view)

    # A report's answer says whether the session is still Ready (_check_still_ready), so it goes before the
    # call. Not when the call resolves the pod first (the first call, one after a reconnect): the resolve reads
    # the session anyway, so the report runs beside the call, which waits for it at its end (a cold session's
    # first command waited 17 to 25 ms for it, issue 53 item 5).
    def _report_activity(self, busy_seconds: float | None) -> Callable[[], None] | None:
        busy = self._throttle.claim(busy_seconds)
        if busy is None:
            return None
        if self.pod.transport.stale:
            beside = threading.Thread(target=self._send_activity, args=(busy,), name="lkc-activity", daemon=True)
            beside.start()
            return beside.join
        self._check_still_ready(self._send_activity(busy))
        return None

    async def _areport_activity(self, busy_seconds: float | None) -> Awaitable[Any] | None:
        # The throttle decides on the loop (no I/O); the PATCH, when due, goes through a worker thread.
        busy = self._throttle.claim(busy_seconds)
        if busy is None:
            return None
        if self.pod.transport.stale:
            return asyncio.ensure_future(asyncio.to_thread(self._send_activity, busy))
        self._check_still_ready(await asyncio.to_thread(self._send_activity, busy))
        return None

    def _check_still_ready(self, answer: Mapping[str, Any] | None) -> None:
        """The activity report's answer carries the session's status: when it is not Ready (suspended since
        the last call, say), ask where the pod is before this call, instead of sending the call to the pod
        that is going away (on a real node it still answers while it terminates: the command would run
        there, and the session be resumed only after). Costs no request: a report is sent anyway."""
        status = answer.get("status") if answer is not None else None
        if isinstance(status, Mapping) and status.get("phase") != Phase.READY:
            self.pod.transport.mark_stale()

    def _send_activity(self, busy: float) -> dict[str, Any] | None:
        try:
            return self._store.report_activity(self.namespace, self.id, busy)
        except Exception as exc:  # the operation itself must not fail on its activity report
            self._throttle.forget()
            log.warning("could not report activity on AgentSession %s/%s: %s", self.namespace, self.id, exc)
            return None

    def wait_ready(self, timeout: float | None = None, on_progress: ProgressCallback | None = None) -> SessionView:
        """Block until the session is Ready (typed errors otherwise) and return what its status says; each
        step on the way goes to `on_progress` (default: the constructor's)."""
        return self._store.wait_ready(
            self.namespace, self.id, timeout or self.ready_timeout, on_progress or self.on_progress
        )

    async def await_ready(
        self, timeout: float | None = None, on_progress: ProgressCallback | None = None
    ) -> SessionView:
        """`wait_ready` off the event loop (a worker thread watches the session; `on_progress` runs there)."""
        return await asyncio.to_thread(self.wait_ready, timeout, on_progress)

    @classmethod
    async def acreate(
        cls, name: str, namespace: str = "default", *, wait: bool = False, **kwargs: Any
    ) -> AgentSessionSandbox:
        """The constructor for async code (LangGraph Platform, `langgraph dev` without --allow-blocking):
        the create-or-attach runs in a worker thread, never on the event loop. `wait`: return once Ready."""
        sandbox = await asyncio.to_thread(functools.partial(cls, name, namespace, **kwargs))
        if wait:
            await sandbox.await_ready()
        return sandbox

    def fork(
        self, name: str, *, suspend_source: bool = False, keep: bool = True, **options: Any
    ) -> AgentSessionSandbox:
        """A new AgentSession `name` whose volumes start as copies of this session's, and its backend.

        The storage layer copies the volumes (a PVC clone); the two sessions share nothing afterwards.
        A Ready source is copied crash-consistently (writes in flight may be partly there);
        `suspend_source=True` suspends this session for the moment of the copy (until the fork is Ready)
        and resumes it after, for an exact copy. `options` are AgentSessionSandbox arguments for the fork
        (warm_pool defaults to the source's; volumes cannot be given). `keep=True`: leaving a `with`
        block on the fork does not delete it.
        """
        return fork_session(
            self._store,
            self.namespace,
            self.id,
            name,
            suspend_source=suspend_source,
            keep=keep,
            connection=self._resolver.connection,
            pod_identity=options.pop("pod_identity", self._resolver.pod_identity),
            ready_timeout=self.ready_timeout,
            on_progress=options.pop("on_progress", self.on_progress),
            **options,
        )

    async def afork(
        self, name: str, *, suspend_source: bool = False, keep: bool = True, **options: Any
    ) -> AgentSessionSandbox:
        """`fork()` from async code (its API calls and waits run in a worker thread)."""
        return await asyncio.to_thread(self.fork, name, suspend_source=suspend_source, keep=keep, **options)

    def delete_session(self) -> bool:
        """Delete the AgentSession (and nothing else: the operator and GC remove what it owned)."""
        return self._store.delete(self.namespace, self.id, self.uid)

    @overload
    def delete(self) -> bool: ...

    @overload
    def delete(self, file_path: str) -> DeleteResult: ...

    def delete(self, file_path: str | None = None) -> DeleteResult | bool:
        """`delete(path)` deletes a file in the sandbox (deepagents). `delete()` without a path still deletes
        the AgentSession, with a DeprecationWarning: one missing argument must not end a session. Use
        `delete_session()`; the overload goes in the next minor release."""
        if file_path is None:
            warnings.warn(
                "AgentSessionSandbox.delete() without a path deletes the whole AgentSession and is deprecated: "
                "call delete_session() (delete(path) deletes a file)",
                DeprecationWarning,
                stacklevel=2,
            )
            return self.delete_session()
        return self.pod.delete(file_path)

    # ---- the pod side: every operation is the PodSandbox's ------------------------------------
    @property
    def id(self) -> str:
        return self.pod.id

    @property
    def transport(self) -> RuntimeTransport:
        return self.pod.transport

    @property
    def grep_exclude_dirs(self) -> tuple[str, ...]:
        return self.pod.grep_exclude_dirs

    @grep_exclude_dirs.setter
    def grep_exclude_dirs(self, value: tuple[str, ...]) -> None:
        self.pod.grep_exclude_dirs = value

    @property
    def enable_capture_offload(self) -> bool:
        return self.pod.enable_capture_offload

    @enable_capture_offload.setter
    def enable_capture_offload(self, value: bool) -> None:
        self.pod.enable_capture_offload = value

    def reconnect(self) -> None:
        self.pod.reconnect()

    def check_identity(self) -> RuntimeInfo:
        return self.pod.check_identity()

    async def acheck_identity(self) -> RuntimeInfo:
        return await self.pod.acheck_identity()

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        return self.pod.execute(command, timeout=timeout)

    async def aexecute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        return await self.pod.aexecute(command, timeout=timeout)

    def execute_with_offload(self, command: str, capture_path: str, **options: Any) -> ExecuteOffloadResult:
        return self.pod.execute_with_offload(command, capture_path, **options)

    async def aexecute_with_offload(self, command: str, capture_path: str, **options: Any) -> ExecuteOffloadResult:
        return await self.pod.aexecute_with_offload(command, capture_path, **options)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return self.pod.upload_files(files)

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return await self.pod.aupload_files(files)

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return self.pod.download_files(paths)

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return await self.pod.adownload_files(paths)

    def write(self, file_path: str, content: str) -> WriteResult:
        return self.pod.write(file_path, content)

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        return await self.pod.awrite(file_path, content)

    def edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:
        return self.pod.edit(file_path, old_string, new_string, replace_all)

    async def aedit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:
        return await self.pod.aedit(file_path, old_string, new_string, replace_all)

    async def adelete(self, file_path: str) -> DeleteResult:
        return await self.pod.adelete(file_path)

    def ls(self, path: str) -> LsResult:
        return self.pod.ls(path)

    async def als(self, path: str) -> LsResult:
        return await self.pod.als(path)

    def grep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> GrepResult:
        return self.pod.grep(pattern, path, glob, max_count=max_count)

    async def agrep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> GrepResult:
        return await self.pod.agrep(pattern, path, glob, max_count=max_count)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        return self.pod.glob(pattern, path)

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        return await self.pod.aglob(pattern, path)

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        return self.pod.read(file_path, offset, limit)

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        return await self.pod.aread(file_path, offset, limit)

    def close(self) -> None:
        self.pod.close()
        self._resolver.close()

    async def aclose(self) -> None:
        await self.pod.aclose()
        # The router credentials and connection strategy close their own clients: off the event loop.
        await asyncio.to_thread(self._resolver.close)

    def __enter__(self) -> AgentSessionSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.created and not self.keep:
                self.delete_session()
        finally:
            self.close()


def fork_session(
    store: SessionStore,
    namespace: str,
    source: str,
    name: str,
    *,
    suspend_source: bool = False,
    **options: Any,
) -> AgentSessionSandbox:
    """Create `name` as a fork of `source` (see `AgentSessionSandbox.fork`) and return its backend."""
    if options.get("volume_claim_templates"):
        raise ValueError("a fork's volumes are copies of the source's: volume_claim_templates cannot be given")
    options.pop("volume_claim_templates", None)
    body = store.require(namespace, source)
    timeout = float(options.get("ready_timeout") or 180)
    # A source already suspended (by its owner, or idle) stays so: we resume only what we suspended.
    already = (
        bool((body.get("spec") or {}).get("suspend")) or (body.get("status") or {}).get("phase") == Phase.SUSPENDED
    )
    ours = suspend_source and not already
    if ours:
        store.set_suspend(namespace, source, True)
    try:
        if suspend_source:
            store.wait_phase(namespace, source, Phase.SUSPENDED, timeout, options.get("on_progress"))
        forked = AgentSessionSandbox(name, namespace, fork_from=source, api_client=store.api_client, **options)
        if suspend_source:
            forked.wait_ready()  # Ready means its volumes are bound: the copy is made
    finally:
        if ours:
            store.set_suspend(namespace, source, False)
    return forked
