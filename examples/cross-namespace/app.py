"""A deep agent of namespace `agents` working in a sandbox of namespace `team-a`, through the sandbox router.

Run it as the `agents/app` ServiceAccount: in a pod of `agents` labelled `agentsession.dev/sandbox-client:
"true"` (the router's NetworkPolicy admits such pods), or from a host with that account's token:

    kubectl create token app -n agents > /tmp/app.token
    python examples/cross-namespace/app.py --router http://<router address>:8080 --token-file /tmp/app.token

Only `connection=` names the router; the client finds the operator's credential issuer itself and renews the
per-session credentials before they expire. The model is scripted unless ANTHROPIC_API_KEY or OPENAI_API_KEY
is set.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from langchain_core.messages import AIMessage

from langchain_k8s_client import SessionManager
from langchain_k8s_client.testing import ScriptedToolModel, tool_call


def _api_client(token_file: str | None) -> object | None:
    """The app's identity: in a pod, its ServiceAccount (None: the client loads it); else a token file."""
    if not token_file:
        return None
    from kubernetes import client, config

    config.load_kube_config()  # the cluster's address and CA from your kubeconfig, the identity from the token
    configuration = client.Configuration.get_default_copy()
    configuration.api_key = {"BearerToken": f"Bearer {Path(token_file).read_text().strip()}"}
    configuration.cert_file = configuration.key_file = None
    return client.ApiClient(configuration)


def _model() -> object:
    if os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("OPENAI_API_KEY"):
        from langchain.chat_models import init_chat_model

        name = "anthropic:claude-sonnet-4-5" if os.environ.get("ANTHROPIC_API_KEY") else "openai:gpt-4.1-mini"
        return init_chat_model(name)
    return ScriptedToolModel(
        messages=iter(
            [
                tool_call("execute", {"command": "echo hello from team-a; hostname", "timeout": 30}, "c1"),
                AIMessage(content="done"),
            ]
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--router", required=True, help="the sandbox router's URL (agentsession-sandbox-router)")
    parser.add_argument("--namespace", default="team-a")
    parser.add_argument("--token-file", help="the app's ServiceAccount token, when run outside its pod")
    args = parser.parse_args()
    manager = SessionManager(
        args.namespace,
        api_client=_api_client(args.token_file),
        warm_pool="python-pool",
        ttl="1h",
        connection=SandboxDirectConnectionConfig(api_url=args.router),
    )
    agent = manager.create_deep_agent(_model(), thread_id="cross-namespace example")
    result = agent.invoke({"messages": [("user", "Say hello from the sandbox, and where it runs.")]})
    for message in result["messages"]:
        print(f"{message.type}: {message.content}")
    manager.delete("cross-namespace example")


if __name__ == "__main__":
    main()
