"""Helpers shared by the operations-kit tests (Argo CD health in Lua, Prometheus rules, the dashboard)."""
