"""The AgentSession API (``agentsession.dev/v1alpha1``): the contract between the client and the operator.

One home for everything both sides must agree on, with no dependency beyond pydantic:

* :mod:`.names`: group, version, kinds, plurals, labels and annotations;
* :mod:`.phases`: phases (and which are terminal), condition types and reasons;
* :mod:`.activity`: the activity annotation the client writes and the operator reads;
* :mod:`.durations`, :mod:`.quantities`, :mod:`.patterns`, :mod:`.timestamps`: value formats and their parsers;
* :mod:`.types`: the pydantic models, from which ``make crds`` generates ``crds/`` (:mod:`.crdgen`) and
  ``docs/api-reference.md`` (:mod:`.apidoc`), and with which both sides read objects.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("agentsession-api")  # pyproject.toml's: the one place it is written
except _metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
