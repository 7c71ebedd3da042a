"""The AgentSession operator: API types, CRD generation and the pure decisions its handlers act on."""
