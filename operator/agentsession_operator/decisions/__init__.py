"""The decisions: pure functions from observed objects (dicts) and the clock to statuses and actions.

No I/O, no kopf, no asyncio: everything here is unit-tested without a cluster (see docs/architecture.md).
"""
