"""The backends' shape (issue 50 item 5): AgentSessionSandbox is a deepagents BaseSandbox that holds a
PodSandbox and delegates every operation to it; PodSandbox is a BaseSandbox too, with nothing in between.

A method PodSandbox overrides (a deepagents one, or one of its own like `check_identity`) that
AgentSessionSandbox does not delegate would run BaseSandbox's default, or be missing: these tests name it."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from deepagents.backends.protocol import SandboxBackendProtocol, execute_accepts_timeout
from deepagents.backends.sandbox import BaseSandbox

from langchain_k8s_client import AgentSessionSandbox, PodSandbox


def _public(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


POD_OPERATIONS = sorted(_public(PodSandbox))
"""Everything PodSandbox itself defines: its overrides of deepagents' methods and its own (id, transport,
reconnect, check_identity, close, ...)."""


def test_agent_session_sandbox_is_a_base_sandbox_holding_a_pod_sandbox() -> None:
    mro = AgentSessionSandbox.__mro__
    assert mro[1] is BaseSandbox and PodSandbox not in mro
    assert all(c.__module__.startswith("deepagents.") for c in mro[1:] if c not in (object,) and c.__name__ != "ABC")
    assert issubclass(AgentSessionSandbox, SandboxBackendProtocol)
    assert execute_accepts_timeout(AgentSessionSandbox)


def test_pod_sandbox_is_a_base_sandbox_with_nothing_in_between() -> None:
    assert PodSandbox.__mro__[1] is BaseSandbox


def test_every_deepagents_method_pod_sandbox_overrides_is_one_of_its_own() -> None:
    """The list below is built from PodSandbox's own names: check that it covers each deepagents method
    PodSandbox overrides (so the delegation tests see a new one as soon as PodSandbox overrides it)."""
    overridden = {
        name
        for name in dir(BaseSandbox)
        if not name.startswith("_") and getattr(PodSandbox, name) is not getattr(BaseSandbox, name)
    }
    assert overridden <= set(POD_OPERATIONS), overridden - set(POD_OPERATIONS)
    assert {"execute", "upload_files", "download_files", "id", "read", "aread", "glob", "grep"} <= overridden


@pytest.mark.parametrize("name", POD_OPERATIONS)
def test_agent_session_sandbox_delegates(name: str) -> None:
    assert name in vars(AgentSessionSandbox), f"AgentSessionSandbox does not delegate PodSandbox.{name}"


class _Pod:
    """Stands for the PodSandbox: records the one call it gets and answers `RESULT`."""

    RESULT = object()

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> object:
            self.calls.append((name, args, kwargs))
            return _Pod.RESULT

        async def arecord(*args: Any, **kwargs: Any) -> object:
            return record(*args, **kwargs)

        return arecord if inspect.iscoroutinefunction(getattr(PodSandbox, name)) else record


def _arguments(method: Any) -> tuple[list[object], dict[str, object]]:
    """A distinct object for every parameter of `method` (optional ones too: a delegator must pass them on)."""
    args: list[object] = []
    kwargs: dict[str, object] = {}
    for parameter in list(inspect.signature(method).parameters.values())[1:]:
        if parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
            args.append(object())
        elif parameter.kind is parameter.KEYWORD_ONLY:
            kwargs[parameter.name] = object()
        elif parameter.kind is parameter.VAR_KEYWORD:
            kwargs["an_option"] = object()
    return args, kwargs


METHODS = [n for n in POD_OPERATIONS if inspect.isfunction(getattr(PodSandbox, n))]


def _backend(pod: object) -> AgentSessionSandbox:
    backend = object.__new__(AgentSessionSandbox)  # no cluster: only `pod` (and the resolver `close` closes)
    backend.pod = pod  # type: ignore[assignment]
    backend._resolver = type("Resolver", (), {"close": lambda self: None})()  # type: ignore[assignment]
    return backend


@pytest.mark.parametrize("name", METHODS)
async def test_each_call_goes_to_the_pod_with_every_argument(name: str) -> None:
    pod = _Pod()
    args, kwargs = _arguments(getattr(PodSandbox, name))
    method = getattr(_backend(pod), name)
    answer = method(*args, **kwargs)
    if inspect.iscoroutinefunction(getattr(AgentSessionSandbox, name)):
        answer = await answer
    if inspect.signature(getattr(PodSandbox, name)).return_annotation not in (None, "None"):
        assert answer is _Pod.RESULT
    assert [call[0] for call in pod.calls] == [name]
    _, sent_args, sent_kwargs = pod.calls[0]
    sent = {id(v) for v in (*sent_args, *sent_kwargs.values())}
    assert sent == {id(v) for v in (*args, *kwargs.values())}


@pytest.mark.parametrize("name", sorted(set(POD_OPERATIONS) - set(METHODS)))
def test_each_attribute_is_the_pods(name: str) -> None:
    pod = type("Pod", (), {name: object()})()
    assert getattr(_backend(pod), name) is getattr(pod, name)


@pytest.mark.parametrize("name", ["grep_exclude_dirs", "enable_capture_offload"])
def test_deepagents_settings_read_and_set_the_pods(name: str) -> None:
    pod = type("Pod", (), {})()
    setattr(pod, name, ("x",))
    backend = _backend(pod)
    assert getattr(backend, name) == ("x",)
    setattr(backend, name, ("y",))
    assert getattr(pod, name) == ("y",)


@pytest.mark.parametrize("closing", ["close", "aclose"])
async def test_closing_closes_the_resolver_too(closing: str) -> None:
    """Both closes end the router credentials and connection strategy the resolver holds (aclose used not to)."""
    closed: list[str] = []
    backend = _backend(_Pod())
    backend._resolver = type("Resolver", (), {"close": lambda self: closed.append("resolver")})()  # type: ignore[assignment]
    answer = getattr(backend, closing)()
    if closing == "aclose":
        await answer
    assert closed == ["resolver"]
