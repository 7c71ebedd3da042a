"""The AgentSession operator: API types, CRD generation and the pure decisions its handlers act on."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("agentsession-operator")  # pyproject.toml's: the one place it is written
except _metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
