// An Express service with one AgentSession sandbox per thread: run any number of replicas, no sticky
// sessions (the session name is a function of the thread id, the state lives in the cluster).
//
//   cd client-ts && npm ci && npm run build && cd ../examples/typescript && npm install && npm start
//   curl -X POST 'localhost:3000/threads/t1/run' -H 'content-type: application/json' -d '{"command": "uname -a"}'
//
// With a model (any LangChain chat model deepagents accepts), POST /threads/:id/agent runs a deep agent
// whose sandbox is that thread's session.
import express from "express";
import { SessionManager, SessionNotReady, SandboxError } from "@agentsession/deepagents";

const sessions = new SessionManager({
  namespace: process.env.NAMESPACE ?? "team-a",
  defaults: { warmPool: process.env.WARM_POOL ?? "python-pool", ttl: "8h", idleTimeout: "30m", idleAction: "Suspend" },
});

const app = express();
app.use(express.json({ limit: "1mb" }));

app.post("/threads/:thread/run", async (req, res) => {
  const command = req.body?.command;
  if (typeof command !== "string" || !command) {
    res.status(400).json({ error: "body must be JSON with a non-empty string field 'command'" });
    return;
  }
  let sandbox;
  try {
    sandbox = await sessions.get(req.params.thread);
    const result = await sandbox.execute(command, { timeout: 120 });
    res.json({ output: result.output, exitCode: result.exitCode, truncated: result.truncated });
  } catch (err) {
    // Typed errors: a session that is not Ready is a 503 the caller may retry; any other SandboxError a 502.
    const status = err instanceof SessionNotReady ? 503 : err instanceof SandboxError ? 502 : 500;
    res.status(status).json({ error: (err as Error).name, message: (err as Error).message });
  } finally {
    sandbox?.close();
  }
});

app.post("/threads/:thread/agent", async (req, res) => {
  const model = process.env.MODEL; // e.g. "anthropic:claude-sonnet-4-5" with its provider package installed
  if (!model) {
    res.status(501).json({ error: "set MODEL to a chat model deepagents can load" });
    return;
  }
  const { agent, backend } = await sessions.createDeepAgent(req.params.thread, { model });
  try {
    const result = await agent.invoke({ messages: [{ role: "user", content: String(req.body?.prompt ?? "") }] });
    res.json({ messages: result.messages.map((m: { content: unknown }) => m.content) });
  } finally {
    backend.close();
  }
});

app.delete("/threads/:thread", async (req, res) => {
  res.json({ deleted: await sessions.delete(req.params.thread) });
});

const port = Number(process.env.PORT ?? 3000);
app.listen(port, "127.0.0.1", () => console.log(`listening on 127.0.0.1:${port}`));
