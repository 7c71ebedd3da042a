"""`SessionManager`: one AgentSession per LangGraph thread, from any process or replica.

The session name is a pure function of the thread id (readable slug + hash, a valid DNS label), so
every replica of an app finds the same sandbox for the same thread without sticky sessions or a
shared in-memory map.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from agentsession_api import names
from langchain_k8s_client.backend import AgentSessionSandbox, fork_session
from langchain_k8s_client.sessions import SessionStore, SessionView

THREAD_LABEL = f"{names.GROUP}/thread-hash"
MANAGER_LABEL = f"{names.GROUP}/managed-by"
MANAGER_VALUE = "langchain-k8s-client"


def session_name(thread_id: str, prefix: str = "thread") -> str:
    """`<prefix>-<slug>-<hash10>`: deterministic, at most 63 characters, lowercase DNS label."""
    if not thread_id:
        raise ValueError("thread_id must not be empty")
    if not re.fullmatch(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", prefix):
        raise ValueError("prefix must be a short lowercase DNS label (at most 22 characters)")
    digest = hashlib.sha256(thread_id.encode()).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9]+", "-", thread_id.lower()).strip("-")
    room = 63 - len(prefix) - len(digest) - 2
    slug = slug[: max(room - 1, 0)].strip("-")
    return f"{prefix}-{slug}-{digest}" if slug else f"{prefix}-{digest}"


def thread_hash(thread_id: str) -> str:
    return hashlib.sha256(thread_id.encode()).hexdigest()[:40]


class SessionManager:
    """Get-or-create the sandbox of a thread; list and delete them.

    `session_defaults` are AgentSessionSandbox keyword arguments for new sessions (warm_pool, ttl,
    idle_timeout, env, ...), `labels` are put on every AgentSession it creates.
    """

    def __init__(
        self,
        namespace: str = "default",
        *,
        prefix: str = "thread",
        labels: Mapping[str, str] | None = None,
        api_client: Any = None,
        **session_defaults: Any,
    ) -> None:
        self.namespace = namespace
        self.prefix = prefix
        self.labels = dict(labels or {})
        self.defaults = session_defaults
        self._store = SessionStore(api_client)

    def name_for(self, thread_id: str) -> str:
        return session_name(thread_id, self.prefix)

    def _labels(self, thread_id: str) -> dict[str, str]:
        return {**self.labels, THREAD_LABEL: thread_hash(thread_id), MANAGER_LABEL: MANAGER_VALUE}

    def get(self, thread_id: str, **overrides: Any) -> AgentSessionSandbox:
        """The thread's backend: the existing session, or a new one (kept after the call: keep=True)."""
        options = {**self.defaults, **overrides}
        labels = self._labels(thread_id)
        return AgentSessionSandbox(
            self.name_for(thread_id),
            self.namespace,
            session_labels=labels,
            keep=True,
            api_client=self._store.api_client,
            **options,
        )

    async def aget(self, thread_id: str, *, wait: bool = False, **overrides: Any) -> AgentSessionSandbox:
        """`get` for async code: the create-or-attach in a worker thread, never on the event loop.
        `wait`: return once Ready (`on_progress`, a default or an override, sees the steps)."""
        sandbox = await asyncio.to_thread(functools.partial(self.get, thread_id, **overrides))
        if wait:
            await sandbox.await_ready()
        return sandbox

    def fork(
        self, thread_id: str, new_thread_id: str, *, suspend_source: bool = False, **overrides: Any
    ) -> AgentSessionSandbox:
        """The new thread's backend, on a fork of `thread_id`'s session (its volumes copied; see
        `AgentSessionSandbox.fork`). The manager's defaults apply, except volumes (the source's are copied)."""
        options = {k: v for k, v in {**self.defaults, **overrides}.items() if k != "volume_claim_templates"}
        return fork_session(
            self._store,
            self.namespace,
            self.name_for(thread_id),
            self.name_for(new_thread_id),
            suspend_source=suspend_source,
            session_labels=self._labels(new_thread_id),
            keep=True,
            **options,
        )

    def create_deep_agent(
        self, model: Any, thread_id: str, *, artifacts_root: str = "/tmp", **agent_kwargs: Any
    ) -> Any:
        """`deepagents.create_deep_agent(model, backend=<this thread's sandbox>, **agent_kwargs)`.

        deepagents offloads large tool results under `<artifacts_root>/large_tool_results`; its default
        root is `/`, which a non-root container (the upstream runtime runs as uid 1000) cannot write.
        `/tmp` is writable in every runtime image, and is where hardened templates mount an emptyDir.
        """
        return self._deep_agent(model, self.get(thread_id), artifacts_root, agent_kwargs)

    async def acreate_deep_agent(
        self, model: Any, thread_id: str, *, artifacts_root: str = "/tmp", **agent_kwargs: Any
    ) -> Any:
        """`create_deep_agent` for async code (LangGraph Platform, `langgraph dev` without --allow-blocking):
        the create-or-attach runs in a worker thread; run the agent with `ainvoke`/`astream`, whose sandbox
        calls run off the event loop too."""
        return self._deep_agent(model, await self.aget(thread_id), artifacts_root, agent_kwargs)

    @staticmethod
    def _deep_agent(model: Any, sandbox: AgentSessionSandbox, artifacts_root: str, agent_kwargs: Any) -> Any:
        from deepagents import create_deep_agent
        from deepagents.backends import CompositeBackend

        backend = CompositeBackend(default=sandbox, routes={}, artifacts_root=artifacts_root)
        return create_deep_agent(model=model, backend=backend, **agent_kwargs)

    def list(self, labels: Mapping[str, str] | None = None) -> list[SessionView]:
        """Sessions this manager created (optionally narrowed by more labels)."""
        selector = {MANAGER_LABEL: MANAGER_VALUE, **self.labels, **(labels or {})}
        return [SessionView.of(body) for body in self._store.list(self.namespace, selector)]

    def delete(self, thread_id: str) -> bool:
        """Delete the thread's AgentSession; False when there was none."""
        return self._store.delete(self.namespace, self.name_for(thread_id))
