"""The settings in force for one session after policy defaults and limits (see policy_resolve.resolve)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agentsession_api.durations import format_duration
from agentsession_api.phases import IdleAction
from agentsession_api.timestamps import format_time


@dataclass(frozen=True)
class Resolved:
    """Effective values: the session's own, else a policy default, capped by policy maxima."""

    warm_pool: str | None = None
    ttl: timedelta | None = None
    idle_timeout: timedelta | None = None
    idle_action: str = IdleAction.DELETE
    labels: dict[str, str] = field(default_factory=dict)
    pod_labels: dict[str, str] = field(default_factory=dict)
    max_ttl: timedelta | None = None
    max_idle_timeout: timedelta | None = None
    pending_max_ttl: timedelta | None = None
    """A lowered maxTtl in its grace period (policy_resolve.max_ttl_in_force); ``ttl`` ends by
    ``pending_max_ttl_at``."""
    pending_max_ttl_at: datetime | None = None
    hibernate_forbidden_by: str | None = None
    """The policies (``AgentSessionPolicy a``) whose limits.allowHibernate false forbids Hibernate, if any."""
    max_checkpoint_bytes: int | None = None
    """The smallest limits.maxCheckpointSize of the applicable policies (the operator's own bound still applies)."""
    max_hibernated: tuple[int, str] | None = None
    """The smallest limits.maxHibernatedSize of the applicable policies, in bytes, and its policy."""

    @property
    def max_hibernated_bytes(self) -> int | None:
        return self.max_hibernated[0] if self.max_hibernated else None

    def to_status(self) -> dict[str, Any]:
        """``status.resolved`` (unset values are None so a merge patch clears them)."""
        return {
            "warmPoolRef": {"name": self.warm_pool} if self.warm_pool else None,
            "ttl": format_duration(self.ttl) if self.ttl else None,
            "idleTimeout": format_duration(self.idle_timeout) if self.idle_timeout else None,
            "idleAction": self.idle_action,
            "maxTtl": format_duration(self.max_ttl) if self.max_ttl else None,
            "maxIdleTimeout": format_duration(self.max_idle_timeout) if self.max_idle_timeout else None,
            "pendingMaxTtl": format_duration(self.pending_max_ttl) if self.pending_max_ttl else None,
            "pendingMaxTtlAt": format_time(self.pending_max_ttl_at) if self.pending_max_ttl_at else None,
        }
