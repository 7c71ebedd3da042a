export * from "./errors.js";
export * as contract from "./generated/contract.js";
export { ActivityThrottle, formatActivity, intervalFor, parseSeconds } from "./activity.js";
export { AgentSessionSandbox, type AgentSessionSandboxOptions, type ForkOptions, forkSession, DEFAULT_COMMAND_TIMEOUT, DEFAULT_MAX_OUTPUT, MAX_COMMAND_TIMEOUT, RUNTIME_PORT } from "./sandbox.js";
export { SessionManager, type SessionManagerOptions, createDeepAgent, sessionName, threadHash, THREAD_LABEL, MANAGER_LABEL, MANAGER_VALUE } from "./manager.js";
export { SessionStore, type SessionView, type SessionSpecOptions, type WaitProgress, conflicts, describeProgress, toSpec, viewOf } from "./sessions.js";
export { RuntimeTransport, type PodEndpoint, type ResponseLimits, DEFAULT_LIMITS } from "./transport.js";
export { type Connection, endpointFor, routerHeaders } from "./endpoints.js";
export { PathPolicy, PathRefused, type PathPolicyOptions, type ResolvedPath } from "./paths.js";
