"""The client end to end: real operator, agent-sandbox controller and python runtime pods."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from deepagents.backends.protocol import SandboxBackendProtocol
from langchain_core.messages import AIMessage

from langchain_k8s_client import AgentSessionSandbox, SessionExpired, SessionManager
from langchain_k8s_client.testing import ScriptedToolModel
from langchain_k8s_client.testing import tool_call as call
from tests.conformance import Deepagents07SandboxTests
from tests.e2e.conftest import Kube

pytestmark = [pytest.mark.e2e, pytest.mark.node, pytest.mark.bothnodes]  # the runtime in a real pod: both nodes


class TestAgentSessionSandboxConformance(Deepagents07SandboxTests):
    """langchain-tests' standard suite against AgentSessionSandbox on the local control plane."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, pool_namespace: str) -> Iterator[SandboxBackendProtocol]:
        with AgentSessionSandbox("conformance", pool_namespace, warm_pool="python-pool", ttl="1h") as backend:
            yield backend


def test_scripted_deep_agent_and_a_second_process(pool_namespace: str, kube: Kube) -> None:
    big = "python3 -c \"print('x' * 100_000)\""
    model = ScriptedToolModel(
        messages=iter(
            [
                call("write_file", {"file_path": "/tmp/w/hello.py", "content": "print('hi')\n"}, "c1"),
                call("execute", {"command": "python3 /tmp/w/hello.py", "timeout": 30}, "c2"),
                call(
                    "edit_file", {"file_path": "/tmp/w/hello.py", "old_string": "'hi'", "new_string": "'edited'"}, "c3"
                ),
                call("read_file", {"file_path": "/tmp/w/hello.py"}, "c4"),
                call("execute", {"command": big, "timeout": 30}, "c5"),
                AIMessage(content="done"),
            ]
        )
    )
    manager = SessionManager(pool_namespace, warm_pool="python-pool", ttl="1h", idle_timeout="10m")
    agent = manager.create_deep_agent(model, thread_id="Thread #1: deep agent")
    result = agent.invoke({"messages": [("user", "go")]})
    tools = {m.tool_call_id: m.content for m in result["messages"] if getattr(m, "type", "") == "tool"}
    assert "hi" in tools["c2"] and "succeeded" in tools["c2"]
    assert "edited" in tools["c4"]
    # 100 KB of output is evicted to the sandbox and replaced by a preview.
    assert len(tools["c5"]) < 20_000 and "large_tool_results" in tools["c5"]

    # Another process, knowing only the thread id, reaches the same sandbox and its files.
    script = textwrap.dedent(f"""
        import json
        from langchain_k8s_client import SessionManager
        m = SessionManager({pool_namespace!r}, warm_pool="python-pool", ttl="1h", idle_timeout="10m")
        b = m.get("Thread #1: deep agent")
        r = b.execute("cat /tmp/w/hello.py; ls /tmp/large_tool_results")
        print(json.dumps({{"out": r.output, "code": r.exit_code, "name": b.id}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert "print('edited')" in answer["out"] and "c5" in answer["out"], answer
    assert answer["name"] == manager.name_for("Thread #1: deep agent")
    assert [s.name for s in manager.list()] == [answer["name"]]
    assert manager.delete("Thread #1: deep agent")


def test_long_command_reports_busy_and_is_not_reaped(pool_namespace: str) -> None:
    with AgentSessionSandbox("busy-client", pool_namespace, warm_pool="python-pool", idle_timeout="3s") as backend:
        started = time.monotonic()
        result = backend.execute("sleep 8; echo finished", timeout=20)
        assert result.exit_code == 0 and "finished" in result.output, result
        assert time.monotonic() - started >= 8
        assert backend.session.phase == "Ready"
        # Left idle, it is reaped; the next call says so with a typed error.
        deadline = time.monotonic() + 60
        while backend.session.phase != "Expired" and time.monotonic() < deadline:
            time.sleep(0.5)
        with pytest.raises(SessionExpired):
            backend.reconnect()
            backend.execute("true")


def test_suspended_session_resumes_on_use(pool_namespace: str, kube: Kube) -> None:
    vct = [
        {
            "metadata": {"name": "workspace"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
    ]
    with AgentSessionSandbox(
        "resumable",
        pool_namespace,
        warm_pool="python-pool",
        idle_timeout="4s",
        idle_action="Suspend",
        volume_claim_templates=vct,
    ) as backend:
        assert backend.write("/workspace/keep.txt", "still here\n").error is None
        kube.wait_for("suspended", lambda: backend.session.phase == "Suspended", timeout=60)
        # A call on a suspended session reports activity, waits for Ready and reconnects to the new pod.
        result = backend.execute("cat /workspace/keep.txt")
        assert result.exit_code == 0 and "still here" in result.output, result
        view = backend.session
        assert view.phase == "Ready" and view.pod_ips
