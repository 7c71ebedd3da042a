"""Deterministic names for the objects a session creates.

The claim name is also the Sandbox, Pod and (optional) headless Service name on a cold start, and PVCs
are named ``<volume>-<sandbox>``. So it must be a DNS-1035 label (at most 63 characters, starting with a
letter, because Service names are DNS-1035 labels), not merely a DNS-1123 subdomain like the session name.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from agentsession_api import patterns

MAX_NAME: Final = 63
HASH_LENGTH: Final = 8
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_INVALID = re.compile(r"[^a-z0-9-]+")


def short_hash(*parts: str) -> str:
    """Eight hex characters that change whenever any part changes."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:HASH_LENGTH]


def is_dns1035_label(value: str) -> bool:
    """Valid as a Service name (and so as any name the claim lends its name to)."""
    return len(value) <= MAX_NAME and bool(_DNS1035_LABEL.fullmatch(value))


def claim_name(session_name: str, session_uid: str) -> str:
    """The session's own name when it is a valid DNS-1035 label, else a readable stem plus a hash.

    The hash covers name and UID, so a session recreated under the same long name gets a fresh claim
    name and never collides with a claim of its predecessor that is still being deleted.
    """
    if is_dns1035_label(session_name):
        return session_name
    stem = _INVALID.sub("-", session_name.lower()).strip("-")
    if not stem[:1].isalpha():
        stem = f"s-{stem}"
    stem = stem[: MAX_NAME - HASH_LENGTH - 1].rstrip("-")
    return f"{stem}-{short_hash(session_name, session_uid)}"


def label_value(value: str) -> str:
    """``value`` when it is a valid label value, else a truncated stem plus a hash (at most 63 characters)."""
    if patterns.is_label_value(value):
        return value
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", value)[: MAX_NAME - HASH_LENGTH - 1].strip("-._")
    return f"{stem}-{short_hash(value)}" if stem else short_hash(value)
