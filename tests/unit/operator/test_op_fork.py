"""decisions/fork.py: a fork's claim volumes, or why it has none; and how status, actions, policy and
admission treat a fork."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agentsession_api import names, phases
from agentsession_operator.admission import rules as admission
from agentsession_operator.decisions import fork
from agentsession_operator.decisions.actions import CreateClaim, PatchStatus, reconcile_actions
from agentsession_operator.decisions.desired import desired_claim
from agentsession_operator.decisions.policy import effective_policy_for
from agentsession_operator.decisions.policy_resolve import resolve
from agentsession_operator.decisions.policy_violations import violations

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
SRC_UID, SRC_CLAIM_UID, SRC_SANDBOX_UID = "src-uid", "src-claim-uid", "src-sandbox-uid"
Obj = dict[str, Any]


def session(name: str, spec: Obj, status: Obj | None = None, uid: str = "uid-" + "x", labels: Obj | None = None) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": "ns",
        "uid": uid,
        "generation": 1,
        "creationTimestamp": "2025-01-01T11:00:00Z",
    }
    if labels:
        meta["labels"] = labels
    body: Obj = {"apiVersion": names.API_VERSION, "kind": names.SESSION_KIND, "metadata": meta, "spec": spec}
    if status is not None:
        body["status"] = status
    return body


def the_fork(**spec: Any) -> Obj:
    return session("work-b", {"forkFrom": {"name": "work"}, **spec}, uid="fork-uid")


def source(phase: str = "Ready") -> Obj:
    return session(
        "work",
        {"warmPoolRef": {"name": "py"}},
        {"phase": phase, "resolved": {"warmPoolRef": {"name": "py"}}},
        uid=SRC_UID,
    )


def owner(uid: str) -> list[Obj]:
    return [{"uid": uid, "controller": True, "kind": "X", "name": "x", "apiVersion": "v1"}]


def claim() -> Obj:
    return {
        "metadata": {"name": "work-claim", "namespace": "ns", "uid": SRC_CLAIM_UID, "ownerReferences": owner(SRC_UID)},
        "status": {"sandbox": {"name": "work-claim"}},
    }


def sandbox(templates: list[Obj] | None = None) -> Obj:
    vcts = [{"metadata": {"name": "workspace", "labels": {"a": "b"}}, "spec": {}}] if templates is None else templates
    return {
        "metadata": {
            "name": "work-claim",
            "namespace": "ns",
            "uid": SRC_SANDBOX_UID,
            "ownerReferences": owner(SRC_CLAIM_UID),
        },
        "spec": {"volumeClaimTemplates": vcts},
    }


def pvc(name: str = "workspace-work-claim", bound: bool = True, owner_uid: str = SRC_SANDBOX_UID) -> Obj:
    spec: Obj = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "2Gi"}},
        "storageClassName": "standard",
        "volumeMode": "Filesystem",
    }
    if bound:
        spec["volumeName"] = "pv-1"
    return {"metadata": {"name": name, "ownerReferences": owner(owner_uid)}, "spec": spec}


CLONES = {"standard": {"metadata": {"name": "standard", "annotations": {names.ANNOTATION_VOLUME_COPY: "Clone"}}}}


def plan(**overrides: Any) -> fork.ForkPlan | fork.ForkBlocked:
    args: dict[str, Any] = {
        "fork": the_fork(),
        "source": source(),
        "source_claim": claim(),
        "source_sandbox": sandbox(),
        "pvcs": {"workspace-work-claim": pvc()},
        "storage_classes": CLONES,
    }
    args.update(overrides)
    return fork.plan_fork(
        args["fork"],
        args["source"],
        args["source_claim"],
        args["source_sandbox"],
        args["pvcs"],
        args["storage_classes"],
    )


def test_the_plan_clones_each_source_pvc_with_its_shape_and_the_source_pool() -> None:
    result = plan()
    assert isinstance(result, fork.ForkPlan)
    assert result.warm_pool == "py" and result.source == "work"
    assert result.volumes == (
        {
            "metadata": {"name": "workspace", "labels": {"a": "b"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "2Gi"}},
                "storageClassName": "standard",
                "dataSource": {"kind": "PersistentVolumeClaim", "name": "workspace-work-claim"},
                "volumeMode": "Filesystem",
            },
        },
    )


def test_agent_sandbox_pvc_names() -> None:
    assert fork.pvc_name("workspace", "sb") == "workspace-sb"
    assert fork.source_pvc_names(sandbox([{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}])) == [
        "a-work-claim",
        "b-work-claim",
    ]
    assert fork.source_pvc_names(None) == []


@pytest.mark.parametrize(
    ("overrides", "phase", "reason", "words"),
    [
        ({"source": None}, "Failed", phases.REASON_SOURCE_NOT_FOUND, "no AgentSession work in namespace ns"),
        ({"fork": session("work", {"forkFrom": {"name": "work"}})}, "Failed", phases.REASON_SOURCE_NOT_FOUND, "itself"),
        ({"source": source("Expired")}, "Failed", phases.REASON_SOURCE_FINISHED, "the source is Expired"),
        ({"source": source("Failed")}, "Failed", phases.REASON_SOURCE_FINISHED, "Ready or Suspended"),
        ({"source_sandbox": sandbox([])}, "Failed", phases.REASON_SOURCE_WITHOUT_VOLUMES, "no volumes to copy"),
        ({"storage_classes": {}}, "Failed", phases.REASON_VOLUME_COPY_UNSUPPORTED, "volume-copy=Clone"),
        (
            {"storage_classes": {"standard": {"metadata": {"annotations": {names.ANNOTATION_VOLUME_COPY: "No"}}}}},
            "Failed",
            phases.REASON_VOLUME_COPY_UNSUPPORTED,
            "StorageClass standard",
        ),
        ({"source": source("Provisioning")}, "Pending", phases.REASON_SOURCE_NOT_READY, "now Provisioning"),
        ({"source_claim": None}, "Pending", phases.REASON_SOURCE_NOT_READY, "Sandbox"),
        ({"pvcs": {}}, "Pending", phases.REASON_SOURCE_NOT_READY, "workspace-work-claim to be bound"),
        ({"pvcs": {"workspace-work-claim": pvc(bound=False)}}, "Pending", phases.REASON_SOURCE_NOT_READY, "bound"),
        (
            {"pvcs": {"workspace-work-claim": pvc(owner_uid="other")}},
            "Pending",
            phases.REASON_SOURCE_NOT_READY,
            "owned",
        ),
    ],
)
def test_why_a_fork_has_no_claim(overrides: Obj, phase: str, reason: str, words: str) -> None:
    result = plan(**overrides)
    assert isinstance(result, fork.ForkBlocked)
    assert (result.phase, result.reason) == (phase, reason)
    assert words in result.message
    if phase == "Failed":
        assert "spec.forkFrom.name" in result.message  # names the field, says what to fix


def test_a_suspended_source_is_copied_once_its_pod_is_gone() -> None:
    stopping = sandbox()
    result = plan(source=source("Suspended"), source_sandbox=stopping)
    assert isinstance(result, fork.ForkBlocked) and result.reason == phases.REASON_SOURCE_NOT_READY
    assert "Pod to stop" in result.message
    stopped = sandbox()
    stopped["status"] = {"conditions": [{"type": "Suspended", "status": "True", "reason": "PodDeleted"}]}
    assert isinstance(plan(source=source("Suspended"), source_sandbox=stopped), fork.ForkPlan)


def test_a_sandbox_the_source_does_not_own_is_never_copied() -> None:
    foreign = sandbox()
    foreign["metadata"]["ownerReferences"] = owner("someone-else")
    result = plan(source_sandbox=foreign)
    assert isinstance(result, fork.ForkBlocked) and result.reason == phases.REASON_SOURCE_NOT_READY


def test_expand_gives_the_fork_the_source_volumes_and_pool_unless_it_names_one() -> None:
    result = plan()
    assert isinstance(result, fork.ForkPlan)
    view = fork.expand(the_fork(), result.warm_pool, result.volumes)
    assert view["spec"]["warmPoolRef"] == {"name": "py"}
    assert view["spec"]["volumeClaimTemplates"][0]["spec"]["dataSource"]["name"] == "workspace-work-claim"
    named = fork.expand(the_fork(warmPoolRef={"name": "other"}), result.warm_pool, result.volumes)
    assert named["spec"]["warmPoolRef"] == {"name": "other"}
    assert the_fork()["spec"] == {"forkFrom": {"name": "work"}}  # the stored object is untouched


def test_the_claim_of_an_expanded_fork_carries_the_clones() -> None:
    result = plan()
    assert isinstance(result, fork.ForkPlan)
    view = fork.expand(the_fork(), result.warm_pool, result.volumes)
    manifest = desired_claim(view, resolve(view), None)
    assert manifest["spec"]["warmPoolRef"] == {"name": "py"}
    (volume,) = manifest["spec"]["volumeClaimTemplates"]
    assert volume["spec"]["dataSource"] == {"kind": "PersistentVolumeClaim", "name": "workspace-work-claim"}


def test_a_blocked_fork_gets_no_claim_and_a_status_that_says_why() -> None:
    blocked = plan(storage_classes={})
    assert isinstance(blocked, fork.ForkBlocked)
    actions = reconcile_actions(the_fork(warmPoolRef={"name": "py"}), None, None, NOW, fork=blocked)
    assert not any(isinstance(a, CreateClaim) for a in actions)
    (status,) = [a.patch for a in actions if isinstance(a, PatchStatus)]
    assert status["phase"] == "Failed"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert ready["reason"] == failed["reason"] == phases.REASON_VOLUME_COPY_UNSUPPORTED
    assert failed["status"] == "True" and "volume-copy=Clone" in failed["message"]


def test_a_waiting_fork_is_pending_and_an_unblocked_one_gets_its_claim() -> None:
    waiting = plan(source=source("Provisioning"))
    assert isinstance(waiting, fork.ForkBlocked)
    actions = reconcile_actions(the_fork(), None, None, NOW, fork=waiting)
    (status,) = [a.patch for a in actions if isinstance(a, PatchStatus)]
    assert status["phase"] == "Pending" and not any(isinstance(a, CreateClaim) for a in actions)
    ready = plan()
    assert isinstance(ready, fork.ForkPlan)
    view = fork.expand(the_fork(), ready.warm_pool, ready.volumes)
    (create,) = [a for a in reconcile_actions(view, None, None, NOW) if isinstance(a, CreateClaim)]
    assert create.manifest["spec"]["volumeClaimTemplates"][0]["spec"]["dataSource"]["kind"] == "PersistentVolumeClaim"


def test_a_failed_fork_is_not_sticky() -> None:
    failed = the_fork()
    failed["status"] = {
        "phase": "Failed",
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": phases.REASON_SOURCE_NOT_FOUND,
                "message": "",
                "lastTransitionTime": "2025-01-01T11:00:00Z",
            }
        ],
    }
    result = plan(fork=failed)
    assert isinstance(result, fork.ForkPlan)
    view = fork.expand(failed, result.warm_pool, result.volumes)
    assert any(isinstance(a, CreateClaim) for a in reconcile_actions(view, None, None, NOW))


def policy(limits: Obj, selector: Obj | None = None) -> Obj:
    spec: Obj = {"limits": limits}
    if selector:
        spec["selector"] = selector
    return {"metadata": {"name": "no-forks", "namespace": "ns"}, "spec": spec}


def test_allow_forks_false_refuses_a_new_fork_only() -> None:
    effective = effective_policy_for(the_fork(), [policy({"allowForks": False})])
    (sentence,) = violations(the_fork(warmPoolRef={"name": "py"}), effective)
    assert sentence.startswith("spec.forkFrom: forks are not allowed (spec.limits.allowForks: false)")
    assert "(AgentSessionPolicy no-forks)" in sentence and "remove spec.forkFrom" in sentence
    assert violations(the_fork(warmPoolRef={"name": "py"}), effective, running=True) == []
    assert violations(session("plain", {"warmPoolRef": {"name": "py"}}), effective) == []
    allowed = effective_policy_for(the_fork(), [policy({"allowForks": True})])
    assert violations(the_fork(warmPoolRef={"name": "py"}), allowed) == []


def test_policies_judge_the_fork_with_the_source_volumes_and_pool() -> None:
    result = plan()
    assert isinstance(result, fork.ForkPlan)
    view = fork.expand(the_fork(), result.warm_pool, result.volumes)
    effective = effective_policy_for(view, [policy({"maxStorage": "1Gi", "allowedWarmPools": ["other"]})])
    found = violations(view, effective)
    assert any(
        "the default warm pool py is not an allowed warm pool" in v or "py is not an allowed" in v for v in found
    )
    assert any("2Gi in total, more than the policy maximum 1Gi" in v for v in found)


def test_admission_refuses_a_missing_self_or_finished_source() -> None:
    assert fork.admission_problems(session("plain", {}), None) == []
    (missing,) = fork.admission_problems(the_fork(), None)
    assert missing.startswith("spec.forkFrom.name work: no AgentSession work in namespace ns")
    (itself,) = fork.admission_problems(session("work", {"forkFrom": {"name": "work"}}), source())
    assert "cannot fork itself" in itself
    (finished,) = fork.admission_problems(the_fork(), source("Expired"))
    assert "the source is Expired" in finished
    assert fork.admission_problems(the_fork(), source("Provisioning")) == []
    assert admission.fork_refusal_message([missing]).startswith("AgentSession fork refused: spec.forkFrom.name")


def test_admission_view_uses_the_source_declared_volumes_and_pool() -> None:
    src = source()
    src["spec"]["volumeClaimTemplates"] = [
        {"metadata": {"name": "w"}, "spec": {"resources": {"requests": {"storage": "5Gi"}}}}
    ]
    view = fork.admission_view(the_fork(), src)
    assert view["spec"]["warmPoolRef"] == {"name": "py"}
    assert view["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "w"
    found = admission.review(view, [policy({"maxStorage": "1Gi"})], [], [], "CREATE")
    assert any("5Gi in total" in v for v in found)


def test_a_forks_claim_pool() -> None:
    mine = {"metadata": {"ownerReferences": owner("fork-uid")}, "spec": {"warmPoolRef": {"name": "py"}}}
    assert fork.claim_warm_pool(mine, the_fork()) == "py"
    assert fork.claim_warm_pool({**mine, "metadata": {"ownerReferences": owner("x")}}, the_fork()) is None
