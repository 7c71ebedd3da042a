"""decisions.hibernate: when an idle Hibernate keeps the sandbox's memory, and every fallback's reason."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentsession_api import names, phases
from agentsession_operator.decisions import hibernate as h
from agentsession_operator.decisions.actions import FinishRestore
from agentsession_operator.kube.hibernation import Hibernator


def test_a_gvisor_template_with_an_agent_is_checkpointed() -> None:
    assert h.template_verdict("gvisor") is None
    assert h.before_checkpoint(agent_reachable=True).hibernate


def test_a_runc_template_suspends_saying_it_is_not_gvisor() -> None:
    verdict = h.template_verdict(None)
    assert verdict is not None and (verdict.hibernate, verdict.reason) == (False, phases.REASON_NOT_GVISOR)
    assert "(default)" in verdict.message
    kata = h.template_verdict("kata")
    assert kata is not None and kata.reason == phases.REASON_NOT_GVISOR


def test_the_agent_finding_a_runc_pod_says_not_gvisor() -> None:
    verdict = h.after_checkpoint(h.CheckpointResult(False, error="no runsc state", not_gvisor=True))
    assert (verdict.hibernate, verdict.reason) == (False, phases.REASON_NOT_GVISOR)


def test_no_agent_suspends_saying_so() -> None:
    verdict = h.before_checkpoint(agent_reachable=False)
    assert (verdict.hibernate, verdict.reason) == (False, phases.REASON_NODE_AGENT_UNAVAILABLE)


def test_a_failed_checkpoint_suspends_with_the_agents_error() -> None:
    verdict = h.after_checkpoint(h.CheckpointResult(False, error="runsc checkpoint exited 1: boom"))
    assert (verdict.hibernate, verdict.reason) == (False, phases.REASON_CHECKPOINT_FAILED)
    assert "boom" in verdict.message


def test_an_image_over_the_bound_is_too_large_and_one_at_it_is_kept() -> None:
    over = h.after_checkpoint(h.CheckpointResult(True, size_bytes=101), max_bytes=100)
    assert (over.hibernate, over.reason) == (False, phases.REASON_CHECKPOINT_TOO_LARGE)
    at = h.after_checkpoint(h.CheckpointResult(True, size_bytes=100), max_bytes=100)
    assert (at.hibernate, at.reason) == (True, phases.REASON_CHECKPOINTED)


def test_every_fallback_reason_is_declared() -> None:
    for reason in (
        phases.REASON_NOT_GVISOR,
        phases.REASON_NODE_AGENT_UNAVAILABLE,
        phases.REASON_CHECKPOINT_FAILED,
        phases.REASON_CHECKPOINT_TOO_LARGE,
    ):
        assert reason in phases.HIBERNATE_FALLBACK_REASONS


def test_checkpoint_names_are_dns_labels_unique_per_uid() -> None:
    a = h.checkpoint_name("s" * 63, "uid-1")
    b = h.checkpoint_name("s" * 63, "uid-2")
    assert a != b and h.is_valid_checkpoint_name(a) and len(a) <= 63


def test_names_with_separators_are_refused() -> None:
    for bad in ("../x", "a/b", "", ".", "A", "a" * 64, "-a", "a\n"):
        assert not h.is_valid_checkpoint_name(bad)


def test_runtime_class_of_a_template() -> None:
    template = {"spec": {"podTemplate": {"spec": {"runtimeClassName": "gvisor"}}}}
    assert h.runtime_class_of(template) == "gvisor"
    assert h.runtime_class_of({"spec": {}}) is None
    assert h.runtime_class_of(None) is None


def test_restore_annotations_only_for_a_valid_name() -> None:
    assert h.restore_annotations("s-abc") == {names.ANNOTATION_RESTORE_FROM: "s-abc"}
    assert h.restore_annotations("../other") == {}
    assert h.restore_annotations(None) == {}


def test_a_spec_that_sets_the_restore_annotation_is_seen() -> None:
    assert h.user_names_restore({names.ANNOTATION_RESTORE_FROM: "victim"})
    assert not h.user_names_restore({"a": "b"})
    assert not h.user_names_restore(None)


def test_checkpoint_age() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert h.checkpoint_age_seconds(now - timedelta(seconds=90), now) == 90
    assert h.checkpoint_age_seconds(None, now) is None


def test_forgetting_an_image_stops_once_deleted_or_every_agent_answered() -> None:
    assert h.forget_step(h.DeleteOutcome(deleted=True, asked=2, unreachable=1), 0) is None
    assert h.forget_step(h.DeleteOutcome(deleted=False, asked=2, unreachable=0), 0) is None  # nobody had it
    assert not h.gave_up(h.DeleteOutcome(deleted=False, asked=2, unreachable=0))


def test_forgetting_an_image_retries_a_bounded_number_of_times_then_gives_up() -> None:
    down = h.DeleteOutcome(deleted=False, asked=1, unreachable=1)
    none_ready = h.DeleteOutcome(deleted=False, asked=0, unreachable=0)
    waits = [h.forget_step(down, attempt) for attempt in range(len(h.FORGET_DELAYS) + 1)]
    assert waits == [*h.FORGET_DELAYS, None] and sum(h.FORGET_DELAYS) <= 60
    assert h.forget_step(none_ready, 0) == h.FORGET_DELAYS[0]
    assert h.gave_up(down) and h.gave_up(none_ready)
    message = h.not_deleted_message("ns", "s-0123456789", none_ready, 4)
    assert "ns/s-0123456789" in message and "no node agent was Ready" in message and "4 tries" in message


def test_the_image_to_forget_is_the_kept_checkpoint_only() -> None:
    own = h.checkpoint_name("s", "u-1")
    meta = {"name": "s", "uid": "u-1"}
    kept = {"metadata": meta, "status": {"hibernation": {"hibernated": True, "checkpoint": own}}}
    assert h.checkpoint_to_forget(kept) == own
    other = {"metadata": meta, "status": {"hibernation": {"hibernated": True, "checkpoint": "s-0123456789"}}}
    assert h.checkpoint_to_forget(other) is None  # not its own name: not its image to delete
    assert h.checkpoint_to_forget({"status": {"hibernation": {"hibernated": False, "checkpoint": None}}}) is None
    assert h.checkpoint_to_forget({}) is None
    record = h.forgotten_record("s-0123456789")
    assert record["hibernated"] is False and record["reason"] == h.REASON_CHECKPOINT_DELETED


def test_a_restore_that_failed_is_recorded_as_restore_failed_bounded() -> None:
    record = h.restore_failed_record("s-1", "pages.img is corrupt:\n sha256 ab" + "x" * 5000)
    assert (record["hibernated"], record["reason"], record["checkpoint"]) == (False, phases.REASON_RESTORE_FAILED, None)
    assert (
        "started fresh, workspace kept" in record["message"] and "pages.img is corrupt: sha256 ab" in record["message"]
    )
    assert len(record["message"]) < 700
    assert phases.REASON_RESTORE_FAILED in phases.HIBERNATE_FALLBACK_REASONS


class _Agents:
    def __init__(self, failure: str | None) -> None:
        self.failure = failure
        self.deleted: list[tuple[str, str]] = []

    async def delete_outcome(self, namespace: str, name: str) -> h.DeleteOutcome:
        self.deleted.append((namespace, name))
        return h.DeleteOutcome(True, 1, 0, self.failure)


class _Kube:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def patch_session_status(self, namespace: str, name: str, patch: dict[str, Any], **_: Any) -> None:
        self.patches.append(patch)


class _Log:
    def info(self, *_: Any, **__: Any) -> None: ...

    def warning(self, *_: Any, **__: Any) -> None: ...


SESSION = {"metadata": {"namespace": "team-a", "name": "s", "uid": "u"}, "status": {"phase": "Ready"}}


@pytest.mark.parametrize(
    ("failure", "reason", "event"),
    [
        (None, phases.REASON_RESTORED, ("Woke", "Normal")),
        ("no checkpoint image", "RestoreFailed", ("RestoreFailed", "Warning")),
    ],
)
def test_finish_restore_reports_what_the_node_agent_answered(
    failure: str | None, reason: str, event: tuple[str, str]
) -> None:
    """The woken pod is Ready: the node agent's delete says whether the shim restored it or started it fresh."""
    kube, agents, events = _Kube(), _Agents(failure), []
    hibernator = Hibernator(kube, agents, lambda obj, r, m, t: events.append((r, m, t)))  # type: ignore[arg-type]
    restored = h.restored_record({"checkpoint": "s-1", "sizeBytes": 10}, datetime(2026, 1, 1, tzinfo=UTC))
    asyncio.run(hibernator.finish_restore(FinishRestore("s-1", restored), SESSION, _Log()))
    assert agents.deleted == [("team-a", "s-1")]
    (patch,) = kube.patches
    assert patch["hibernation"]["reason"] == reason and patch["hibernation"]["hibernated"] is False
    ((name, message, kind),) = events
    assert (name, kind) == event
    if failure:
        assert failure in message and failure in patch["hibernation"]["message"]


def test_the_operator_sends_the_bound_and_reads_the_agents_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49 item 3: the bound goes with the checkpoint request (maxBytes), so the agent refuses a sandbox
    over it before writing; its 413 is a plain Suspend, CheckpointTooLarge, saying nothing was written."""
    from agentsession_operator.kube.node_agent import AgentSelector, NodeAgents

    sent: list[dict[str, Any]] = []

    class Lister:
        async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
            ready = [{"type": "Ready", "status": "True"}]
            return [{"status": {"podIP": "10.0.0.1", "conditions": ready}}]

    class Tokens:
        async def token(self, node: str) -> str:
            return "operator-token"

    agents = NodeAgents(Lister(), AgentSelector("ns", "app=agent"), Tokens())

    async def post(ip: str, path: str, body: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
        sent.append(body)
        return 413, {"error": "over", "measuredBytes": 10 << 30, "maxBytes": 1 << 20}

    monkeypatch.setattr(agents, "_post", post)
    result = asyncio.run(agents.checkpoint("team-a", "pod-1", "s-1", "s", max_bytes=1 << 20))
    assert sent[0]["maxBytes"] == 1 << 20
    verdict = h.after_checkpoint(result, max_bytes=1 << 20)
    assert (verdict.hibernate, verdict.reason) == (False, phases.REASON_CHECKPOINT_TOO_LARGE)
    assert str(10 << 30) in verdict.message and str(1 << 20) in verdict.message
    assert "nothing was written" in verdict.message and not result.ok


def test_the_hibernator_asks_with_the_sessions_bound() -> None:
    """The bound sent is the one the image is judged by: the operator's, lowered by the policies'."""
    from agentsession_operator.decisions.actions import HibernateSandbox

    asked: list[int | None] = []

    class Agents:
        async def reachable(self) -> bool:
            return True

        async def checkpoint(
            self, namespace: str, pod: str, name: str, restore_into: str, max_bytes: int | None = None, node: str = ""
        ) -> h.CheckpointResult:
            asked.append(max_bytes)
            return h.CheckpointResult(True, size_bytes=10)

        async def delete(self, namespace: str, name: str) -> bool:
            return True

    hibernator = Hibernator(_Kube(), Agents(), lambda *a: None, max_bytes=1000)  # type: ignore[arg-type]
    for policy_bound, expected in ((None, 1000), (100, 100), (5000, 1000)):
        action = HibernateSandbox("sb", "pod", "s-1", {}, max_bytes=policy_bound)
        asyncio.run(hibernator.hibernate(action, SESSION, _Log()))
        assert asked[-1] == expected
