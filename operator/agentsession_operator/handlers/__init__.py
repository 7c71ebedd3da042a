"""kopf handlers: thin registrations that hand over to the reconciler (kube/) or the admission rules.

Importing this package registers the startup and watch handlers with kopf's default registry; the
validating webhook's handler is registered by the CLI only when the webhook is served.
"""

from agentsession_operator.handlers import events, startup

__all__ = ["events", "startup"]
