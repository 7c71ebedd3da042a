"""Owner references: the only proof that an object belongs to a session (names can collide, UIDs cannot)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentsession_api import names


def owner_uids(obj: Mapping[str, Any] | None) -> set[str]:
    """UIDs of every owner of ``obj``."""
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return {ref["uid"] for ref in refs if isinstance(ref, dict) and ref.get("uid")}


def is_owned_by(obj: Mapping[str, Any] | None, owner_uid: str | None) -> bool:
    """True only when an ownerReference of ``obj`` carries ``owner_uid``."""
    return bool(owner_uid) and owner_uid in owner_uids(obj)


def session_owner_reference(session: Mapping[str, Any]) -> dict[str, Any]:
    """The controller reference a child of ``session`` carries (garbage collection deletes the child with it)."""
    meta = session.get("metadata") or {}
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.SESSION_KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
