"""The operator refuses to start against AgentSession CRDs older than it (issue 27): an old CRD prunes
the fields it lacks, so a policy limit added since would vanish without an error."""

from __future__ import annotations

import pytest

from agentsession_api import names
from agentsession_operator.kube import preflight

SESSIONS, POLICIES = preflight.OWN_CRDS
CURRENT = {names.ANNOTATION_SCHEMA_REVISION: str(names.SCHEMA_REVISION)}


def test_current_crds_pass() -> None:
    assert preflight.stale_crds({SESSIONS: CURRENT, POLICIES: CURRENT}) == []


def test_newer_crds_pass() -> None:
    newer = {names.ANNOTATION_SCHEMA_REVISION: str(names.SCHEMA_REVISION + 1)}
    assert preflight.stale_crds({SESSIONS: newer, POLICIES: newer}) == []


def test_crds_from_before_revisions_are_revision_zero() -> None:
    found = preflight.stale_crds({SESSIONS: {}, POLICIES: CURRENT})
    assert found == [f"CRD {SESSIONS} has schema revision 0, this operator needs {names.SCHEMA_REVISION}"]


def test_an_older_revision_and_a_missing_crd_are_both_named() -> None:
    found = preflight.stale_crds({SESSIONS: None, POLICIES: {names.ANNOTATION_SCHEMA_REVISION: "1"}}, required=2)
    assert found == [f"CRD {SESSIONS} is not installed", f"CRD {POLICIES} has schema revision 1, this operator needs 2"]


def test_a_garbled_revision_is_reported_not_crashed_on() -> None:
    (found,) = preflight.stale_crds({SESSIONS: {names.ANNOTATION_SCHEMA_REVISION: "v2"}, POLICIES: CURRENT})
    assert "'v2', not a number" in found


class _Kube:
    """The one call check_own_crds makes, answered from a dict (the e2e test uses a real API server)."""

    def __init__(self, annotations: dict[str, dict[str, str] | None]) -> None:
        self.annotations = annotations


async def test_the_error_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    async def annotations(kube: _Kube, name: str) -> dict[str, str] | None:
        return kube.annotations[name]

    monkeypatch.setattr(preflight, "_annotations", annotations)
    with pytest.raises(preflight.PreflightError) as err:
        await preflight.check_own_crds(_Kube({SESSIONS: {}, POLICIES: {}}))  # type: ignore[arg-type]
    message = str(err.value.code)
    assert message.startswith("agentsession-operator cannot start: the installed AgentSession CRDs are older")
    assert preflight.CRD_UPGRADE_COMMAND in message and "never upgrades them" in message
    assert f"{POLICIES} has schema revision 0" in message


def test_agent_sandbox_passes_when_every_crd_serves_its_version() -> None:
    served: dict[str, list[str] | None] = {crd: ["v1alpha1", version] for crd, version in preflight.REQUIRED.items()}
    assert preflight.problems(served) == []


def test_agent_sandbox_missing_and_old_crds_are_each_named() -> None:
    claims, pools, templates, sandboxes = preflight.REQUIRED
    served: dict[str, list[str] | None] = {claims: None, pools: [], templates: None, sandboxes: ["v1alpha0"]}
    assert preflight.problems(served) == [
        f"CRD {claims} is not installed",
        f"CRD {pools} serves no version, not {preflight.REQUIRED[pools]}",
        f"CRD {templates} is not installed",
        f"CRD {sandboxes} serves v1alpha0, not {preflight.REQUIRED[sandboxes]}",
    ]


class _Served:
    """The one call check_agent_sandbox makes (Kube.crd_served_versions), answered from a dict."""

    def __init__(self, served: dict[str, list[str] | None]) -> None:
        self.served = served

    async def crd_served_versions(self, crd: str) -> list[str] | None:
        return self.served.get(crd)


async def test_an_old_agent_sandbox_stops_the_start_with_what_to_install() -> None:
    with pytest.raises(preflight.PreflightError) as err:
        await preflight.check_agent_sandbox(_Served({}))  # type: ignore[arg-type]
    message = str(err.value.code)
    assert message.startswith("agentsession-operator cannot start: agent-sandbox v1.0 or newer")
    assert "sandbox-with-extensions.yaml" in message
    assert all(f"CRD {crd} is not installed" in message for crd in preflight.REQUIRED)
    ok = {crd: [version] for crd, version in preflight.REQUIRED.items()}
    await preflight.check_agent_sandbox(_Served(ok))  # type: ignore[arg-type]  # no error
