"""Drive a deep agent without an LLM: a fake chat model that replays scripted tool calls.

The stock fake chat models cannot bind tools; this one can, so `create_deep_agent` accepts it. Useful
for tests and demos of code that uses `AgentSessionSandbox`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage


class ScriptedToolModel(GenericFakeChatModel):
    """Replays `messages` (an iterator of AIMessage) in order, whatever the prompt."""

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> ScriptedToolModel:
        return self


def tool_call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    """An assistant message that calls one tool."""
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])
