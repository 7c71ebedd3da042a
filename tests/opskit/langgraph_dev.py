"""How the tests (and docs/operations.md) run `langgraph dev` on a machine that must not phone home."""

from __future__ import annotations

# Each turns off one thing langgraph dev would reach out for: the CLI's analytics, its version check on
# PyPI, LangSmith tracing (both spellings).
OFFLINE = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
}
# Unset: a key would turn on tracing, a real model, or the license metadata beacon.
SECRETS = (
    "LANGSMITH_API_KEY",
    "LANGCHAIN_API_KEY",
    "LANGGRAPH_CLOUD_LICENSE_KEY",
    "LANGSMITH_CONTROL_PLANE_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
)
# Loopback only, no browser. No --allow-blocking: the example graph never blocks the event loop, as
# LangGraph Platform requires.
FLAGS = ("--host", "127.0.0.1", "--no-browser")
