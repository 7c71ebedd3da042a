"""Start and stop: kopf's storage and watch settings, the webhook server, the API client and the reconciler."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Any

import kopf

from agentsession_operator import constants as c
from agentsession_operator.decisions.network import NetworkSettings
from agentsession_operator.handlers import admission
from agentsession_operator.infra import memory, webhook_server
from agentsession_operator.kube import webhook
from agentsession_operator.kube.client import LIST_PAGE, Kube
from agentsession_operator.kube.leader import KubeLeaseAPI, LeaderElector
from agentsession_operator.kube.reconciler import Config, Reconciler
from agentsession_operator.kube.resync import RESYNC_PERIOD

WORKER_IDLE = 0.5  # seconds


class NoEssence(kopf.DiffBaseStorage):
    """No change-handler (on.create/update/delete) exists: nothing compares an object's "essence", so none
    is built. kopf deep-copies every event's body to build one anyway: 6.6 % of the operator's CPU while
    sessions were created (py-spy). A change-handler added one day needs a real storage again, with our
    own names from the start: kopf.AnnotationsDiffBaseStorage(prefix=c.KOPF_PREFIX,
    key="last-handled-configuration"), the activity annotation among its ignored_fields."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.startup()
async def startup(
    settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
) -> None:
    # Our own storage names from day one: changing them later makes kopf treat every object as new.
    settings.persistence.finalizer = c.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=c.KOPF_PREFIX)
    settings.persistence.diffbase_storage = NoEssence()
    # Never silently stop watching: bounded server-side watches, and a client timeout just above.
    # A watch the server keeps open but that delivers nothing (a stalled apiserver or etcd, a cut TCP
    # connection) ends after inactivity_timeout and kopf lists again.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.watching.inactivity_timeout = 600
    # kopf's listings in pages, as ours (prime, resync): 10,000 sessions decoded at once were ~150 MiB.
    settings.watching.chunk_size = LIST_PAGE
    # A worker per object keeps its last event's body until it has been idle this long (kopf: 5 s): at a
    # start every listed object has one at once, and 5 s of 3,000 sessions' bodies was a third of the
    # peak. A new event after it exits starts a new worker: microseconds.
    settings.queueing.idle_timeout = WORKER_IDLE
    settings.posting.level = logging.WARNING
    settings.networking.request_timeout = 60
    kube = await Kube.connect()
    await _serve_admission(settings, memo.get("webhook"), kube)
    config = Config(network=memo.get("network") or NetworkSettings())
    if "expiry_warning" in memo:  # set by cli (None: never warn); kopf run / KopfRunner keep the default
        config = dataclasses.replace(config, expiry_warning=memo.expiry_warning)
    reconciler = Reconciler(kube, config)
    await reconciler.prime(memo.get("namespaces") or ())  # before any watch event: none judged without its policies
    reconciler.scheduler.start()
    period = memo.get("resync_period") or RESYNC_PERIOD
    memo.resync = asyncio.create_task(reconciler.resync_forever(period), name="cache-resync")
    memo.gc = asyncio.create_task(memory.collect_forever(), name="gc-freeze")  # see infra/memory.py
    memo.kube = kube
    memo.reconciler = reconciler
    election = memo.get("election")  # cli.Election, or None: the only replica, always leader
    memo.elector = None
    if election is not None:
        memo.lease_api = KubeLeaseAPI.connect(election.timing.round_timeout)  # its own client and timeout
        elector = LeaderElector(
            memo.lease_api,
            election.namespace,
            election.name,
            election.identity,
            election.timing,
            on_started_leading=reconciler.take_over,
        )
        reconciler.is_leader = elector.is_leader
        elector.start()
        memo.elector = elector
    logger.info("agentsession operator started")


async def _serve_admission(
    settings: kopf.OperatorSettings, config: webhook_server.WebhookConfig | None, kube: Kube
) -> None:
    """The webhook server (when enabled), with the shared certificate, publishing into the shipped configuration."""
    if config is None or not config.enabled:
        webhook_server.configure(settings, config)
        return
    files = None
    if config.cert_secret is not None:
        namespace, name = config.cert_secret
        try:
            bundle = await webhook.shared_certificate(
                kube, namespace, name, config.server_names(), config.generate, required=config.required_names()
            )
        except webhook.CertificateUnavailable as err:
            await kube.close()
            raise kopf.TemporaryError(str(err), delay=10) from err
        files = webhook_server.temporary_files(bundle)
    publish = None
    if config.configuration:
        hooks = {f"{admission.HANDLER_ID}.{config.configuration}": admission.HANDLER_ID}
        publish = webhook.publisher(kube, config.configuration, hooks, None)
    webhook_server.configure(settings, config, webhook_server.build_server(config, files, publish))


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    if memo.get("elector") is not None:
        await memo.elector.stop()  # stop acting, then release the Lease: the standby takes over at once
        await memo.lease_api.close()
    for task in (memo.get("resync"), memo.get("gc")):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    await memo.reconciler.scheduler.stop()
    await memo.kube.close()
