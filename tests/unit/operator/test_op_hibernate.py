"""decisions.hibernate: when an idle Hibernate keeps the sandbox's memory, and every fallback's reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentsession_api import names, phases
from agentsession_operator.decisions import hibernate as h


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
