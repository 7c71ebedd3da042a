"""The graph-per-thread pattern under `langgraph dev`: every LangGraph thread gets its own sandbox.

langgraph.json points `langgraph dev` (or LangGraph Platform) at :data:`graph`. Its one node builds the
thread's deep agent with :class:`SessionManager`: the AgentSession is named after the thread id, so any
replica of the server finds the same sandbox for the same thread, and two threads never share one. The
server's checkpointer keeps the conversation; the cluster keeps the sandbox (TTL, idle timeout).

The node is async and never blocks the server's event loop (LangGraph Platform refuses blocking calls, and
so does `langgraph dev` without --allow-blocking): the session's create-or-attach and every sandbox call run
in worker threads (`acreate_deep_agent`, `ainvoke`).

Settings (environment): AGENTSESSION_NAMESPACE (default "default"), AGENTSESSION_WARM_POOL ("python-pool"),
AGENTSESSION_TTL ("1h"), AGENTSESSION_IDLE_TIMEOUT ("15m"). The model is a real one with ANTHROPIC_API_KEY
or OPENAI_API_KEY (LANGGRAPH_EXAMPLE_MODEL names it), else a scripted one that writes and reads a file in the
thread's sandbox, so the example runs with no traffic leaving the machine.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph

from langchain_k8s_client import SessionManager, WaitProgress
from langchain_k8s_client.testing import ScriptedToolModel
from langchain_k8s_client.testing import tool_call as call

log = logging.getLogger("thread_sandbox_graph")
_manager: SessionManager | None = None


def _progress(step: WaitProgress) -> None:
    """A cold session takes seconds to be Ready: the server's log says where it is."""
    log.info("sandbox of the thread: %s", step)


def _new_manager() -> SessionManager:
    return SessionManager(
        os.environ.get("AGENTSESSION_NAMESPACE", "default"),
        warm_pool=os.environ.get("AGENTSESSION_WARM_POOL", "python-pool"),
        ttl=os.environ.get("AGENTSESSION_TTL", "1h"),
        idle_timeout=os.environ.get("AGENTSESSION_IDLE_TIMEOUT", "15m"),
        on_progress=_progress,
    )


async def manager() -> SessionManager:
    """One manager per server process, built in a worker thread (it reads the Kubernetes config files)."""
    global _manager
    if _manager is None:
        _manager = await asyncio.to_thread(_new_manager)
    return _manager


def model(thread_id: str) -> Any:
    if os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("OPENAI_API_KEY"):
        from langchain.chat_models import init_chat_model

        default = "anthropic:claude-sonnet-4-5" if os.environ.get("ANTHROPIC_API_KEY") else "openai:gpt-4o-mini"
        return init_chat_model(os.environ.get("LANGGRAPH_EXAMPLE_MODEL", default))
    # Scripted: proves the sandbox is the thread's own (the file holds this thread's id, nobody else's).
    note = "/tmp/thread.txt"
    return ScriptedToolModel(
        messages=iter(
            [
                call("write_file", {"file_path": note, "content": f"{thread_id}\n"}, "call-write"),
                call("execute", {"command": f"cat {note}", "timeout": 30}, "call-read"),
                AIMessage(content=f"Wrote and read {note} in this thread's own sandbox."),
            ]
        )
    )


async def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
    """Run this thread's deep agent on the conversation so far; only its new messages join the state."""
    thread_id = str((config.get("configurable") or {}).get("thread_id") or "")
    if not thread_id:
        raise ValueError("run this graph on a thread (langgraph dev: POST /threads, then /threads/{id}/runs)")
    sessions = await manager()
    deep_agent = await sessions.acreate_deep_agent(model(thread_id), thread_id=thread_id)
    result = await deep_agent.ainvoke({"messages": state["messages"]}, {"recursion_limit": 50})
    return {"messages": result["messages"][len(state["messages"]) :]}


graph = StateGraph(MessagesState).add_node("agent", agent).add_edge(START, "agent").add_edge("agent", END).compile()
