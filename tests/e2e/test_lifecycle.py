"""Idle reaping, suspend/resume, orphans and retention, end to end on the local control plane."""

from __future__ import annotations

import datetime as dt
import shlex
import time
from typing import Any

import httpx
import pytest

from testkit import manifests
from tests.e2e.conftest import RUNTIMES, Kube, OperatorProcess
from tests.e2e.test_operator import session_in_phase

pytestmark = pytest.mark.e2e

ACTIVITY = "agentsession.dev/activity"
# Each test asserts the reaping window: never before the deadline, at most this long after it.
WINDOW = dt.timedelta(seconds=30)


def ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def report_activity(kube: Kube, name: str, namespace: str, busy: float = 0) -> None:
    """What the client does: one annotation, "<its clock> busy=<seconds>"."""
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    kube.run("annotate", "--overwrite", "agentsession", name, "-n", namespace, f"{ACTIVITY}={stamp} busy={busy:g}")


def pause_pool(kube: Kube, namespace: str) -> None:
    kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", 0), namespace=namespace)


def test_idle_session_is_reaped_within_the_window(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    pause_pool(kube, namespace)
    kube.apply(manifests.session("idle", "pool", idleTimeout="4s"), namespace=namespace)
    ready = session_in_phase(kube, "idle", namespace, "Ready")
    deadline = ts(ready["status"]["idleDeadline"])
    assert deadline == ts(ready["status"]["lastActivityTime"]) + dt.timedelta(seconds=4)
    expired = session_in_phase(kube, "idle", namespace, "Expired", timeout=60)
    cond = kube.condition(expired, "Expired")
    assert cond is not None and cond["reason"] == "IdleTimeout"
    reaped_at = ts(cond["lastTransitionTime"])
    assert deadline <= reaped_at <= deadline + WINDOW, (deadline, reaped_at)
    kube.wait_for("claim deleted", lambda: kube.get("sandboxclaim", ready["status"]["claimName"], namespace) is None)


def test_activity_and_busy_reports_keep_a_session(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    # Twice the idle timeout of reports, with room for a loaded machine between two of them (a report and
    # two reads can take seconds there): the property is "reports keep it", not "the machine is fast".
    IDLE = 8
    pause_pool(kube, namespace)
    kube.apply(
        manifests.session("kept", "pool", idleTimeout=f"{IDLE}s"),
        manifests.session("busy", "pool", idleTimeout=f"{IDLE}s"),
        namespace=namespace,
    )
    session_in_phase(kube, "kept", namespace, "Ready")
    session_in_phase(kube, "busy", namespace, "Ready")
    # A command longer than the idle timeout: the client reports "busy until now + its timeout" first.
    report_activity(kube, "busy", namespace, busy=2 * IDLE + 4)
    started = time.monotonic()
    while time.monotonic() - started < 2 * IDLE:
        report_activity(kube, "kept", namespace)
        time.sleep(1)
        for name in ("kept", "busy"):
            phase = (kube.get("agentsession", name, namespace) or {}).get("status", {}).get("phase")
            assert phase == "Ready", f"{name} was reaped while active or busy ({phase})"
    busy = kube.get("agentsession", "busy", namespace)
    assert busy is not None
    busy_until = ts(busy["status"]["busyUntil"])
    expired = session_in_phase(kube, "busy", namespace, "Expired", timeout=60)
    reaped_at = ts(kube.condition(expired, "Expired")["lastTransitionTime"])  # type: ignore[index]
    assert reaped_at >= busy_until + dt.timedelta(seconds=IDLE), (busy_until, reaped_at)


def _exec(ip: str, script: str) -> dict[str, Any]:
    r = httpx.post(f"http://{ip}:8888/execute", json={"command": f"sh -c {shlex.quote(script)}"}, timeout=30)
    return dict(r.json())


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_idle_suspend_keeps_the_workspace_and_activity_resumes(
    kube: Kube, namespace: str, operator: OperatorProcess, runtime: str | None
) -> None:
    kube.apply(
        manifests.template(
            "py",
            manifests.PYTHON_RUNTIME_IMAGE,
            vct_policy="Allowed",
            volume_mounts=[{"name": "workspace", "mountPath": "/workspace"}],
            volumes=[{"name": "workspace", "emptyDir": {}}],
            runtime_class=runtime,
        ),
        manifests.warm_pool("py", "py", 0),
        manifests.session(
            "sleepy",
            "py",
            idleTimeout="5s",
            idleAction="Suspend",
            volumeClaimTemplates=[
                {
                    "metadata": {"name": "workspace"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }
            ],
        ),
        namespace=namespace,
    )
    ready = session_in_phase(kube, "sleepy", namespace, "Ready")
    pod_name, old_ip = ready["status"]["podName"], ready["status"]["podIPs"][0]
    assert _exec(old_ip, "echo kept > /workspace/note.txt")["exit_code"] == 0
    old_pod = kube.get("pod", pod_name, namespace)
    assert old_pod is not None
    suspended = session_in_phase(kube, "sleepy", namespace, "Suspended", timeout=60)
    assert ts(suspended["status"]["idleDeadline"]) <= dt.datetime.now(dt.UTC)
    sandbox = kube.get("sandbox", suspended["status"]["sandboxName"], namespace)
    assert sandbox is not None and sandbox["spec"]["operatingMode"] == "Suspended"
    kube.wait_for("pod removed", lambda: kube.get("pod", pod_name, namespace) is None)
    assert kube.get("pvc", f"workspace-{pod_name}", namespace) is not None

    report_activity(kube, "sleepy", namespace)
    resumed = kube.wait_for(
        "resumed with a new pod",
        lambda: (
            (s := kube.get("agentsession", "sleepy", namespace))
            and s["status"].get("phase") == "Ready"
            and (p := kube.get("pod", pod_name, namespace))
            and p["metadata"]["uid"] != old_pod["metadata"]["uid"]
            and s
        ),
        timeout=90,
    )
    new_pod = kube.get("pod", pod_name, namespace)
    assert new_pod is not None and resumed["status"]["podIPs"] == [new_pod["status"]["podIP"]]
    assert _exec(resumed["status"]["podIPs"][0], "cat /workspace/note.txt")["stdout"].strip() == "kept"


def test_spec_suspend_on_demand(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    pause_pool(kube, namespace)
    kube.apply(manifests.session("ondemand", "pool"), namespace=namespace)
    ready = session_in_phase(kube, "ondemand", namespace, "Ready")
    kube.run("patch", "agentsession", "ondemand", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    session_in_phase(kube, "ondemand", namespace, "Suspended", timeout=60)
    kube.wait_for("pod removed", lambda: kube.get("pod", ready["status"]["podName"], namespace) is None)
    kube.run("patch", "agentsession", "ondemand", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    session_in_phase(kube, "ondemand", namespace, "Ready", timeout=60)
    session = kube.get("agentsession", "ondemand", namespace)
    assert session is not None and session["spec"]["suspend"] is False  # the operator never writes spec


def test_orphan_claims(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    pause_pool(kube, namespace)
    kube.apply(manifests.session("owner", "pool"), namespace=namespace)
    owner = session_in_phase(kube, "owner", namespace, "Ready")
    ours = {"app.kubernetes.io/managed-by": "agentsession-operator"}
    orphan = manifests.claim("orphan", "pool")
    orphan["metadata"]["labels"] = {
        **ours,
        "agentsession.dev/session": "gone",
        "agentsession.dev/session-uid": "00000000-0000-0000-0000-000000000000",
    }
    adopted = manifests.claim("has-owner", "pool")
    adopted["metadata"]["labels"] = {
        **ours,
        "agentsession.dev/session": "owner",
        "agentsession.dev/session-uid": owner["metadata"]["uid"],
    }
    kube.apply(orphan, adopted, namespace=namespace)
    # A second orphan applied after both: once it is gone the operator has seen has-owner's event (one
    # watch stream per kind delivers in order) and judged it, so its presence then is the verdict.
    later = manifests.claim("orphan-later", "pool")
    later["metadata"]["labels"] = {**orphan["metadata"]["labels"]}
    kube.apply(later, namespace=namespace)
    for name in ("orphan", "orphan-later"):
        kube.wait_for(f"{name} removed", lambda n=name: kube.get("sandboxclaim", n, namespace) is None, timeout=30)
    assert kube.get("sandboxclaim", "has-owner", namespace) is not None


def test_retention_deletes_finished_sessions(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    pause_pool(kube, namespace)
    policy = {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": "retention"},
        "spec": {"cleanup": {"deleteFinishedAfter": "3s"}},
    }
    kube.apply(policy, manifests.session("brief", "pool", ttl="4s"), namespace=namespace)
    expired = session_in_phase(kube, "brief", namespace, "Expired", timeout=60)
    finished = ts(kube.condition(expired, "Expired")["lastTransitionTime"])  # type: ignore[index]
    kube.wait_for("finished session deleted", lambda: kube.get("agentsession", "brief", namespace) is None, timeout=60)
    assert dt.datetime.now(dt.UTC) >= finished + dt.timedelta(seconds=3)
