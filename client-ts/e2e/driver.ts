// A small CLI for tests/e2e/test_ts_client.py: one JSON request on argv[2], one JSON answer on stdout.
// It is how the Python tests drive the TypeScript client against the cluster they started. A step that fails
// ends the steps: its answer is {error: the error's class name, message}.
import { AgentSessionSandbox, SessionConflict, SessionManager, sessionName } from "../src/index.js";

type Step =
  | { op: "execute"; command: string; timeout?: number }
  | { op: "write"; path: string; content: string }
  | { op: "read"; path: string }
  | { op: "identity" }
  | { op: "session" }
  | { op: "delete" }
  | { op: "fork"; name: string; suspendSource?: boolean; read: string };

interface Request {
  namespace: string;
  session?: string;
  thread?: string;
  options?: Record<string, unknown>;
  steps: Step[];
}

async function main(): Promise<void> {
  const req = JSON.parse(process.argv[2]!) as Request;
  const results: unknown[] = [];
  let sb: AgentSessionSandbox;
  try {
    if (req.thread !== undefined) {
      sb = await new SessionManager({ namespace: req.namespace, defaults: req.options }).get(req.thread);
    } else {
      sb = await AgentSessionSandbox.create(req.session!, { namespace: req.namespace, ...req.options });
    }
  } catch (err) {
    const kind = err instanceof SessionConflict ? "SessionConflict" : (err as Error).name;
    process.stdout.write(JSON.stringify({ error: kind, message: String((err as Error).message) }));
    return;
  }
  try {
    for (const step of req.steps) {
      try {
        await runStep(sb, step, results);
      } catch (err) {
        results.push({ error: (err as Error).name, message: String((err as Error).message) });
        break;
      }
    }
    process.stdout.write(JSON.stringify({ name: sb.id, created: sb.created, uid: sb.uid, nameOf: req.thread ? sessionName(req.thread) : null, results }));
  } finally {
    sb.close();
  }
}

async function runStep(sb: AgentSessionSandbox, step: Step, results: unknown[]): Promise<void> {
  switch (step.op) {
    case "execute":
      results.push(await sb.execute(step.command, { timeout: step.timeout }));
      break;
    case "write":
      results.push((await sb.uploadFiles([[step.path, new TextEncoder().encode(step.content)]]))[0]);
      break;
    case "read": {
      const [d] = await sb.downloadFiles([step.path]);
      results.push({ error: d!.error, content: d!.content ? new TextDecoder().decode(d!.content) : null });
      break;
    }
    case "identity": {
      const info = await sb.checkIdentity();
      results.push({ hostname: info.hostname, addresses: info.addresses });
      break;
    }
    case "session":
      results.push(await sb.session());
      break;
    case "delete":
      results.push(await sb.deleteSession());
      break;
    case "fork": {
      const forked = await sb.fork(step.name, { suspendSource: step.suspendSource });
      try {
        const [d] = await forked.downloadFiles([step.read]);
        results.push({ name: forked.id, uid: forked.uid, created: forked.created, content: d!.content ? new TextDecoder().decode(d!.content) : d!.error });
      } finally {
        forked.close();
      }
      break;
    }
  }
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack ?? err}\n`);
  process.exit(1);
});
