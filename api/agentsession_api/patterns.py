"""Kubernetes name rules as regular expressions, shared by the CRD schema and the Python checks.

Each pattern is written once and used both as the schema ``pattern``/CEL regex (RE2) and here (Python
``re``): the subset used is the same in both engines, so admission and the operator agree.
"""

from __future__ import annotations

import re
from typing import Final

DNS1123_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_SUBDOMAIN_MAX: Final = 253

_PREFIX: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME: Final = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
QUALIFIED_NAME: Final = rf"^({_PREFIX}/)?{_NAME}$"
"""A label or annotation key: optional DNS-subdomain prefix and ``/``, then a name of at most 63 characters.
The prefix's own limit (253) is checked separately (see :func:`is_qualified_name`)."""
QUALIFIED_NAME_MAX: Final = DNS1123_SUBDOMAIN_MAX + 1 + 63
LABEL_VALUE: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MAX: Final = 63
ENV_NAME: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
"""Kubernetes' own rule for environment variable names (looser than C identifiers)."""
ENV_NAME_MAX: Final = 256
ENV_GLOB: Final = r"^[-._a-zA-Z0-9*?]+$"
"""An environment variable name pattern in a policy: name characters plus ``*`` and ``?``."""

_DNS1123_LABEL_RE = re.compile(DNS1123_LABEL)
_QUALIFIED_NAME_RE = re.compile(QUALIFIED_NAME)
_LABEL_VALUE_RE = re.compile(LABEL_VALUE)


def is_dns1123_label(value: str) -> bool:
    """Valid as a Pod, Sandbox or SandboxClaim name."""
    return len(value) <= DNS1123_LABEL_MAX and bool(_DNS1123_LABEL_RE.fullmatch(value))


def is_qualified_name(key: str) -> bool:
    """Valid as a label or annotation key."""
    prefix, slash, _ = key.rpartition("/")
    return bool(_QUALIFIED_NAME_RE.fullmatch(key)) and (not slash or len(prefix) <= DNS1123_SUBDOMAIN_MAX)


def is_label_value(value: str) -> bool:
    """Valid as a label value (empty allowed)."""
    return len(value) <= LABEL_VALUE_MAX and bool(_LABEL_VALUE_RE.fullmatch(value))


def key_domain(key: str) -> str | None:
    """The lower-cased prefix of a qualified key (``sandbox.users.io`` of ``sandbox.users.io/x``), or None."""
    prefix, slash, _ = key.partition("/")
    return prefix.lower() if slash else None


def in_domain(domain: str, domains: tuple[str, ...] | list[str]) -> bool:
    """True when ``domain`` is one of ``domains`` or a subdomain of one (agent-sandbox's rule)."""
    return any(domain == d or domain.endswith("." + d) for d in domains)
