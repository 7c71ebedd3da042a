"""The node agent (issue 33): a DaemonSet that checkpoints one gVisor pod's sandbox on the operator's request.

It runs on every gVisor node, reads nothing of the cluster but TokenReviews, and answers two requests only:
checkpoint one pod into ``<root>/<namespace>/<name>``, delete one image. See docs/gvisor.md.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("agentsession-nodeagent")  # pyproject.toml's: the one place it is written
except _metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
