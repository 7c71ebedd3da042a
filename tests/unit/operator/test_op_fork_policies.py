"""Issue 28 item 7: a fork is held by every policy that selects its source (and its source's sources).

Attack: a fork copies its source's volumes, so it carries the source's data; if only the policies selecting
the fork's own labels judged it, a tenant could fork restricted data under labels an open policy selects
(internet egress), or chain forks to keep the data past the source's maxTtl.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import kopf
import pytest

from agentsession_api import names
from agentsession_api.durations import parse_duration
from agentsession_api.types import AgentSessionStatus
from agentsession_operator.admission import handler as admission_handler
from agentsession_operator.admission import rules as admission
from agentsession_operator.decisions import fork, lifecycle, naming, network
from agentsession_operator.decisions.policy import effective_policy_for
from agentsession_operator.decisions.policy_resolve import resolve
from agentsession_operator.decisions.policy_violations import violations
from agentsession_operator.handlers.state import OperatorState
from agentsession_operator.kube.cache import Cache
from agentsession_operator.kube.places import Admitted
from agentsession_operator.kube.reconciler import Reconciler

Obj = dict[str, Any]
Make = Callable[..., Obj]
T0 = datetime(2025, 1, 1, 10, 0, tzinfo=UTC)


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def restricted_policies(make_policy: Make) -> list[Obj]:
    """``restricted`` holds data=restricted sessions: no egress beyond one internal range, 1h at most, no
    forks of forks allowed to escape it; ``internet`` opens the internet to everything not labelled data."""
    return [
        make_policy(
            "restricted",
            {
                "selector": {"matchLabels": {"data": "restricted"}},
                "limits": {"maxTtl": "1h"},
                "egress": {"allowCIDRs": ["10.1.0.0/16"]},
            },
        ),
        make_policy(
            "internet",
            {
                "selector": {"matchExpressions": [{"key": "data", "operator": "DoesNotExist"}]},
                "egress": {"allowCIDRs": ["0.0.0.0/0"], "dns": True},
            },
        ),
    ]


def source(make_session: Make, labels: dict[str, str] | None = None, created: datetime = T0) -> Obj:
    return make_session(
        "src",
        uid="src-uid",
        labels={"data": "restricted"} if labels is None else labels,
        created=stamp(created),
        spec={"warmPoolRef": {"name": "python-pool"}, "ttl": "1h"},
        status={"phase": "Ready", "resolved": {"warmPoolRef": {"name": "python-pool"}}},
    )


def a_fork(make_session: Make, name: str, of: str, created: datetime, labels: dict[str, str] | None = None) -> Obj:
    return make_session(name, uid=f"{name}-uid", labels=labels, created=stamp(created), spec={"forkFrom": {"name": of}})


def recorded(stored_fork: Obj, its_source: Obj) -> Obj:
    """The fork as the operator leaves it: Ready, with the lineage it recorded from its source."""
    return {
        **stored_fork,
        "status": {
            "phase": "Ready",
            "lineage": fork.lineage_of(its_source),
            "resolved": {"warmPoolRef": {"name": "python-pool"}},
        },
    }


def test_a_fork_without_the_source_label_gets_no_internet_egress(make_session: Make, make_policy: Make) -> None:
    policies = restricted_policies(make_policy)
    src = source(make_session)
    assert network.merge_egress(effective_policy_for(src, policies).egress).cidrs == ("10.1.0.0/16",)
    # The fork drops the label: only `internet` selects its own labels.
    view = fork.admission_view(a_fork(make_session, "copy", "src", T0 + timedelta(minutes=5)), src)
    egress = network.merge_egress(effective_policy_for(view, policies).egress)
    assert "0.0.0.0/0" not in egress.cidrs and egress.cidrs == ("10.1.0.0/16",), egress
    assert "restricted" in effective_policy_for(view, policies).policies
    # Labels no policy selects at all: the source's policy alone, never more than it allows.
    alone = [p for p in policies if p["metadata"]["name"] == "restricted"]
    view = fork.admission_view(a_fork(make_session, "copy", "src", T0 + timedelta(minutes=5), {"x": "y"}), src)
    assert network.merge_egress(effective_policy_for(view, alone).egress).cidrs == ("10.1.0.0/16",)


def test_a_fork_of_a_restricted_source_cannot_outlive_its_max_ttl(make_session: Make, make_policy: Make) -> None:
    policies = restricted_policies(make_policy)
    src = source(make_session)
    view = fork.admission_view(a_fork(make_session, "copy", "src", T0 + timedelta(minutes=50)), src)
    deadline = lifecycle.expires_at(view, resolve(view, effective_policy_for(view, policies)))
    assert deadline is not None and deadline <= T0 + timedelta(hours=1), deadline


def test_a_chain_of_forks_cannot_exceed_the_source_max_ttl(make_session: Make, make_policy: Make) -> None:
    policies = restricted_policies(make_policy)
    src = source(make_session)
    first = recorded(a_fork(make_session, "copy-1", "src", T0 + timedelta(minutes=50)), src)
    # The source is gone by now; the chain goes on from the first copy, relabelled at will.
    second = fork.admission_view(a_fork(make_session, "copy-2", "copy-1", T0 + timedelta(minutes=55)), first)
    effective = effective_policy_for(second, policies)
    deadline = lifecycle.expires_at(second, resolve(second, effective))
    assert deadline is not None and deadline <= T0 + timedelta(hours=1), deadline
    assert network.merge_egress(effective.egress).cidrs == ("10.1.0.0/16",)
    # A third copy of the second, made after the source's hour: nothing left to give it.
    third = fork.admission_view(
        a_fork(make_session, "copy-3", "copy-2", T0 + timedelta(minutes=70)), recorded(second, first)
    )
    found = violations(third, effective_policy_for(third, policies))
    assert any("maxTtl" in v and "src" in v for v in found), found


def test_a_relabelled_fork_is_still_held_by_the_source_policies(make_session: Make, make_policy: Make) -> None:
    policies = restricted_policies(make_policy)
    src = source(make_session)
    stored = recorded(a_fork(make_session, "copy", "src", T0 + timedelta(minutes=5), {"data": "restricted"}), src)
    relabelled = {**stored, "metadata": {**stored["metadata"], "labels": {"tier": "open"}}}
    effective = effective_policy_for(relabelled, policies)
    assert network.merge_egress(effective.egress).cidrs == ("10.1.0.0/16",)
    assert effective.max_ttl is not None and effective.max_ttl.value == timedelta(hours=1)
    # Leaving the label is no departure from `restricted`: it still holds (the lineage selects it).
    assert admission.departures(relabelled, stored, policies) == []


def test_a_source_policy_denying_forks_refuses_a_relabelled_fork(make_session: Make, make_policy: Make) -> None:
    policies = [
        make_policy("no-forks", {"selector": {"matchLabels": {"data": "restricted"}}, "limits": {"allowForks": False}})
    ]
    src = source(make_session)
    view = fork.admission_view(a_fork(make_session, "copy", "src", T0 + timedelta(minutes=5)), src)
    found = admission.review(view, policies, ["sandbox.users.io"], [], "CREATE")
    assert any("forks are not allowed" in v and "no-forks" in v for v in found), found
    # Nor a fork of a fork the policy came to select only through its source.
    first = recorded(a_fork(make_session, "copy-1", "src", T0 + timedelta(minutes=5), {"tier": "open"}), src)
    second = fork.admission_view(a_fork(make_session, "copy-2", "copy-1", T0 + timedelta(minutes=6)), first)
    assert any("no-forks" in v for v in admission.review(second, policies, ["sandbox.users.io"], [], "CREATE"))


# --- The reconciler: the lineage is recorded before the claim, and outlives the source -------------------
class ForkKube:
    """A fake API server for one fork pass: sessions by name, the source's claim, Sandbox and PVC."""

    def __init__(self, sessions: dict[str, Obj]) -> None:
        self.sessions = sessions
        self.calls: list[str] = []
        self.claims: list[Obj] = []
        self.network_policies: list[Obj] = []
        self.objects: dict[tuple[str, str], Obj] = {}

    async def get_session(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.sessions.get(name))

    async def patch_session_status(
        self, namespace: str, name: str, status: Obj, uid: str | None = None, has_status: bool = True
    ) -> Obj | None:
        self.calls.append("status:" + ",".join(sorted(status)))
        merged = {k: v for k, v in {**(self.sessions[name].get("status") or {}), **status}.items() if v is not None}
        AgentSessionStatus.model_validate(merged)
        self.sessions[name] = {**self.sessions[name], "status": merged}
        return copy.deepcopy(self.sessions[name])

    async def get_claim(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.objects.get(("claim", name)))

    async def get_sandbox(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.objects.get(("sandbox", name)))

    async def get_pvc(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.objects.get(("pvc", name)))

    async def get_storage_class(self, name: str) -> Obj | None:
        return {"metadata": {"name": name, "annotations": {names.ANNOTATION_VOLUME_COPY: names.VOLUME_COPY_CLONE}}}

    async def get_warm_pool(self, namespace: str, name: str) -> Obj | None:
        return {"metadata": {"name": name, "namespace": namespace}}

    async def allowed_label_domains(self, namespace: str, name: str) -> list[str]:
        return ["sandbox.users.io"]

    async def create_claim(self, claim: Obj) -> Obj | None:
        self.calls.append("create_claim")
        created = {**claim, "metadata": {**claim["metadata"], "uid": "fork-claim-uid"}}
        self.claims.append(created)
        return created

    async def create_network_policy(self, manifest: Obj) -> Obj | None:
        self.network_policies.append(manifest)
        return manifest

    async def event(self, obj: Obj, reason: str, message: str, type_: str = "Normal") -> None:
        pass


def _owned(uid: str) -> list[Obj]:
    return [{"uid": uid, "controller": True, "kind": "X", "name": "x", "apiVersion": "v1"}]


def _source_objects(fake: ForkKube, src: Obj) -> None:
    claim_name = naming.claim_name("src", "src-uid")
    fake.objects[("claim", claim_name)] = {
        "metadata": {"name": claim_name, "namespace": "ns", "uid": "src-claim", "ownerReferences": _owned("src-uid")},
        "status": {"sandbox": {"name": "src-box"}},
    }
    fake.objects[("sandbox", "src-box")] = {
        "metadata": {
            "name": "src-box",
            "namespace": "ns",
            "uid": "src-box-uid",
            "ownerReferences": _owned("src-claim"),
        },
        "spec": {"volumeClaimTemplates": [{"metadata": {"name": "workspace"}, "spec": {}}]},
    }
    fake.objects[("pvc", "workspace-src-box")] = {
        "metadata": {"name": "workspace-src-box", "namespace": "ns", "ownerReferences": _owned("src-box-uid")},
        "spec": {"volumeName": "pv-1", "storageClassName": "csi", "resources": {"requests": {"storage": "1Gi"}}},
    }


def _egress_cidrs(manifest: Obj) -> list[str]:
    return [
        peer["ipBlock"]["cidr"]
        for rule in manifest["spec"].get("egress") or []
        for peer in rule.get("to") or []
        if "ipBlock" in peer
    ]


async def test_the_reconciler_records_the_lineage_before_the_claim_and_keeps_it(
    make_session: Make, make_policy: Make
) -> None:
    now = datetime.now(UTC)
    src = source(make_session, created=now - timedelta(minutes=10))
    copy_ = a_fork(make_session, "copy", "src", now - timedelta(minutes=1), {"tier": "open"})
    fake = ForkKube({"src": src, "copy": copy_})
    _source_objects(fake, src)
    rec = Reconciler(fake)  # type: ignore[arg-type]
    rec.cache.loaded = True
    for p in restricted_policies(make_policy):
        rec.cache.policies["ns"][p["metadata"]["name"]] = p
    await rec.reconcile(("ns", "copy"), cause="test")
    await asyncio.gather(*rec._background)

    assert fake.calls[:2] == ["status:lineage", "create_claim"], fake.calls  # recorded first: never a claim without
    (entry,) = fake.sessions["copy"]["status"]["lineage"]
    assert entry["name"] == "src" and entry["labels"] == {"data": "restricted"}
    (netpol,) = fake.network_policies
    assert _egress_cidrs(netpol) and all(c.startswith("10.1.") for c in _egress_cidrs(netpol)), netpol
    resolved = fake.sessions["copy"]["status"]["resolved"]
    assert parse_duration(resolved["maxTtl"]) == timedelta(minutes=51)  # the source's hour, counted from its start

    # The source is deleted and the fork relabelled: the recorded lineage still selects `restricted`.
    stored = fake.sessions["copy"]
    relabelled = {**stored, "metadata": {**stored["metadata"], "labels": {"tier": "open", "other": "x"}}}
    assert "restricted" in effective_policy_for(relabelled, restricted_policies(make_policy)).policies


# --- The webhook: a fork of a fork made a moment ago is judged by the grandparent's policies -------------
class SessionsKube:
    def __init__(self, sessions: dict[str, Obj]) -> None:
        self.sessions = sessions

    async def get_session(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.sessions.get(name))


class WebhookReconciler:
    def __init__(self, policies: list[Obj], sessions: dict[str, Obj]) -> None:
        self.cache = Cache()
        for p in policies:
            self.cache.policies[p["metadata"]["namespace"]][p["metadata"]["name"]] = p
        self.kube = SessionsKube(sessions)
        self.admitted = Admitted()  # every namespace is capped (the operator's default): admission reads places

    async def label_domains(self) -> list[str]:
        return ["sandbox.users.io"]

    def caches(self, namespace: str) -> bool:  # one replica: every namespace its own
        return True


async def test_the_webhook_refuses_a_fork_of_an_unrecorded_fork_for_the_grandparent_policy(
    make_session: Make, make_policy: Make
) -> None:
    policies = [
        make_policy("no-forks", {"selector": {"matchLabels": {"data": "restricted"}}, "limits": {"allowForks": False}})
    ]
    src = source(make_session)
    # copy-1 was created a moment ago (before no-forks existed): no pass has recorded its lineage yet.
    first = a_fork(make_session, "copy-1", "src", T0 + timedelta(minutes=5), {"tier": "open"})
    second = a_fork(make_session, "copy-2", "copy-1", T0 + timedelta(minutes=6), {"tier": "open"})
    memo = kopf.Memo(state=OperatorState(reconciler=WebhookReconciler(policies, {"src": src, "copy-1": first})))
    with pytest.raises(kopf.AdmissionError) as err:
        await admission_handler.validate_session(
            body=kopf.Body(cast(kopf.RawBody, second)), memo=memo, warnings=[], operation="CREATE"
        )
    assert err.value.code == 422 and "no-forks" in str(err.value) and "allowForks: false" in str(err.value)
