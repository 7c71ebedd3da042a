"""`make demo`: a deep agent working in a Kubernetes sandbox, on the local control plane.

Brings up the control plane (building it the first time), installs the CRDs, starts the operator,
applies a warm pool, then runs a deep agent whose sandbox is an AgentSession: a scripted model by
default, a real one when ANTHROPIC_API_KEY or OPENAI_API_KEY is set. Prints the conversation and
`kubectl get agentsessions`, then tears everything down (`--keep` leaves the cluster running).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devcluster import errors
from devcluster.cluster import Cluster, Paths

REPO = Path(__file__).resolve().parents[1]
os.environ["KUBECONFIG"] = str(Paths().kubeconfig)  # before the kubernetes client is imported
NAMESPACE = "demo"
THREAD = "demo-thread-1"
TASK = (
    "Write a Python script /workspace/primes.py that prints the prime numbers below 50, run it, then "
    "fix it to also print how many there are, run it again and tell me the count."
)


def say(message: str) -> None:
    print(f"\n\033[1m==> {message}\033[0m", flush=True)


def scripted_model() -> Any:
    from langchain_core.messages import AIMessage

    from langchain_k8s_client.testing import ScriptedToolModel
    from langchain_k8s_client.testing import tool_call as call

    script = "primes = [n for n in range(2, 50) if all(n % d for d in range(2, int(n ** 0.5) + 1))]\nprint(*primes)\n"
    return ScriptedToolModel(
        messages=iter(
            [
                call("write_file", {"file_path": "/workspace/primes.py", "content": script}, "call-1"),
                call("execute", {"command": "python3 /workspace/primes.py", "timeout": 30}, "call-2"),
                call(
                    "edit_file",
                    {
                        "file_path": "/workspace/primes.py",
                        "old_string": "print(*primes)\n",
                        "new_string": "print(*primes)\nprint('count:', len(primes))\n",
                    },
                    "call-3",
                ),
                call("execute", {"command": "python3 /workspace/primes.py && hostname", "timeout": 30}, "call-4"),
                AIMessage(content="There are 15 primes below 50 (the script prints them and the count)."),
            ]
        )
    )


def real_model() -> Any | None:
    from langchain.chat_models import init_chat_model

    if os.environ.get("ANTHROPIC_API_KEY"):
        return init_chat_model(os.environ.get("DEMO_MODEL", "anthropic:claude-sonnet-4-5"))
    if os.environ.get("OPENAI_API_KEY"):
        return init_chat_model(os.environ.get("DEMO_MODEL", "openai:gpt-4o-mini"))
    return None


def print_conversation(messages: list[Any]) -> None:
    for message in messages:
        kind = getattr(message, "type", "")
        if kind == "human":
            print(f"\n[user] {message.content}")
        elif kind == "ai":
            for tool_call in getattr(message, "tool_calls", None) or []:
                args = ", ".join(
                    f"{k}={v!r}" if len(repr(v)) < 80 else f"{k}=<{len(str(v))} chars>"
                    for k, v in tool_call["args"].items()
                )
                print(f"[agent -> {tool_call['name']}] {args}")
            if message.content:
                print(f"[agent] {message.content}")
        elif kind == "tool":
            text = str(message.content)
            print("[tool] " + (text if len(text) < 600 else text[:600] + " ...").replace("\n", "\n       "))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="leave the cluster (and the session) running")
    args = parser.parse_args()

    say("Local control plane (the first run builds Kubernetes and agent-sandbox from Go modules)")
    cluster = Cluster()
    started = cluster.up()
    operator: subprocess.Popen[bytes] | None = None
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        say("Operator (python -m agentsession_operator; log .cluster/logs/operator-demo.log)")
        log = (cluster.paths.logs / "operator-demo.log").open("ab")
        operator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentsession_operator",
                "--bind",
                "127.0.0.1",
                "--metrics-port",
                "0",
                "--health-port",
                str(free_port()),
                "--webhook-port",
                str(free_port()),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        cluster.kubectl("create", "namespace", NAMESPACE, check=False)
        cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(REPO / "examples" / "00-python-pool.yaml"))
        time.sleep(2)

        from langchain_k8s_client import SessionManager

        model = real_model()
        say(f"Deep agent with {'a real model' if model else 'a scripted model (set ANTHROPIC_API_KEY for a real one)'}")
        manager = SessionManager(NAMESPACE, warm_pool="python-pool", ttl="1h", idle_timeout="15m")
        agent = manager.create_deep_agent(model or scripted_model(), thread_id=THREAD)
        started_at = time.monotonic()
        result = agent.invoke({"messages": [("user", TASK)]})
        print_conversation(result["messages"])
        print(f"\n(agent finished in {time.monotonic() - started_at:.1f} s)")

        say("kubectl get agentsessions -n demo -o wide")
        print(cluster.kubectl("get", "agentsessions", "-n", NAMESPACE, "-o", "wide").stdout)
        if not args.keep:
            manager.delete(THREAD)
    finally:
        if operator is not None:
            operator.terminate()
            operator.wait(timeout=30)
        if args.keep:
            say(
                f"Left running: export KUBECONFIG={cluster.paths.kubeconfig}; `make operator` runs the operator, "
                "`make cluster-down` stops everything"
            )
        elif started:
            say("Tearing down")
            cluster.down()


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
