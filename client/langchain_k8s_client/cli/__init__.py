"""`kubectl agentsession`: the client's command line, a kubectl plugin (console script `kubectl-agentsession`).

Built only on the client's public pieces (`SessionStore`, `AgentSessionSandbox`); argparse only, so
installing the client pulls no new dependency.
"""

from langchain_k8s_client.cli.main import main

__all__ = ["main"]
