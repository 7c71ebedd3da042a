"""Start and stop: kopf's storage and watch settings, the webhook server, the API client and the reconciler."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import kopf

from agentsession_operator import constants as c
from agentsession_operator.admission import certificate as webhook
from agentsession_operator.admission import handler as admission
from agentsession_operator.admission import server as webhook_server
from agentsession_operator.handlers.state import of
from agentsession_operator.infra import memory, metrics
from agentsession_operator.issuer.server import IssuerServer
from agentsession_operator.kube import primed_watch
from agentsession_operator.kube.api import load_credentials
from agentsession_operator.kube.client import LIST_PAGE, Kube
from agentsession_operator.kube.election import KubeLeaseAPI, LayoutGuard, LeaderElector, ShardElector
from agentsession_operator.kube.reconciler import Config, Reconciler
from agentsession_operator.settings import OperatorSettings

WORKER_IDLE = 0.5  # seconds


class NoEssence(kopf.DiffBaseStorage):
    """No change-handler (on.create/update/delete) exists: nothing compares an object's "essence", so none
    is built. kopf deep-copies every event's body to build one anyway, a visible share of the operator's CPU
    while sessions are created. A change-handler added one day needs a real storage again, with our
    own names from the start: kopf.AnnotationsDiffBaseStorage(prefix=c.KOPF_PREFIX,
    key="last-handled-configuration"), the activity annotation among its ignored_fields."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """kopf's watches and patches use the credentials our own client uses (kube/api.py): the pod's
    ServiceAccount (its token re-read as it rotates: kopf logs in again on a 401), or the kubeconfig's
    context with its certificates, token or exec plugin."""
    return kopf.ConnectionInfo(**load_credentials().connection_info())


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
    # kopf's listings in pages, as ours (prime, resync): a whole listing decoded at once sets the peak memory.
    settings.watching.chunk_size = LIST_PAGE
    # A worker per object keeps its last event's body until it has been idle this long (kopf: 5 s): at a
    # start every listed object has one at once, a large share of the peak memory. A new event after it
    # exits starts a new worker, which is cheap.
    settings.queueing.idle_timeout = WORKER_IDLE
    settings.posting.level = logging.WARNING
    settings.networking.request_timeout = 60
    state = of(memo)
    kube = state.kube = await Kube.connect()
    files = await _serve_admission(settings, state.webhook, kube)
    config = reconciler_config(state.settings)
    elector: LeaderElector | ShardElector | None = None
    shards: ShardElector | None = None
    if state.election is not None and state.election.shards > 1:  # a share of the namespaces (election/sharding.py)
        election = state.election
        state.lease_api = KubeLeaseAPI.connect(election.timing.round_timeout, kube.api_client.credentials)
        elector = state.elector = shards = ShardElector(
            state.lease_api,
            election.namespace,
            election.name,
            election.identity,
            election.shards,
            election.timing,
            on_change=lambda gained, lost: reconciler.shards_changed(gained, lost),
        )
    elif state.election is not None:  # else the only replica, always leader
        election = state.election
        state.lease_api = KubeLeaseAPI.connect(
            election.timing.round_timeout, kube.api_client.credentials
        )  # its own client and timeout
        elector = state.elector = LeaderElector(
            state.lease_api,
            election.namespace,
            election.name,
            election.identity,
            election.timing,
            on_started_leading=lambda: reconciler.take_over(),
            guard=LayoutGuard(
                state.lease_api, election.namespace, election.name, election.identity, 1, election.timing
            ),
        )
    single = elector if isinstance(elector, LeaderElector) else None
    reconciler = state.reconciler = Reconciler(
        kube,
        config,
        is_leader=single.is_leader if single else None,
        shards=shards,
        hold=single.hold if single else None,
    )
    if shards is not None:
        metrics.report_shard_readiness(
            shards.count, lambda shard: shards.held(shard) and shard in reconciler.ready_shards
        )
    if reconciler.agent_authority is not None:  # said at start, not at the first hibernation
        try:
            await reconciler.agent_authority.ca()
        except Exception as err:
            logger.error(f"node agents get nothing (Hibernate suspends as Suspend): {err}")
    primed_watch.install(reconciler.primed_versions)  # kopf watches from the prime's listings, no second one
    await reconciler.prime(state.settings.namespace)  # before any watch event: none judged without its policies
    if state.issuer is not None:  # every replica issues (no Lease: issuing writes nothing), reading its cache first
        state.issuer_server = IssuerServer(state.issuer, kube, seen=reconciler.cache)
        await state.issuer_server.start(files)
    reconciler.scheduler.start()
    if elector is None:  # the only replica: every session's first pass, from the cache (a leader's at election)
        await reconciler.take_over()
    state.tasks = [
        asyncio.create_task(reconciler.resync_forever(state.settings.resync_period), name="cache-resync"),
        asyncio.create_task(memory.collect_forever(), name="gc-freeze"),  # see infra/memory.py
    ]
    if elector is not None:
        elector.start()
    logger.info("agentsession operator started")


def reconciler_config(settings: OperatorSettings) -> Config:
    """The reconciler's share of the settings, taken from them here alone: kube/ sits below settings.py and
    cannot read them itself (tests/unit/test_architecture.py)."""
    return Config(
        network=settings.network_settings(),
        expiry_warning=settings.expiry_warning_time(),
        node_agent=settings.node_agent,
        node_agent_token=settings.node_agent_token,
        node_agent_account=settings.node_agent_account,
        node_agent_ca_secret=settings.agent_ca_secret(),
        max_checkpoint_bytes=settings.max_checkpoint_size,
        max_sessions_per_namespace=settings.max_sessions_per_namespace,
    )


async def _serve_admission(
    settings: kopf.OperatorSettings, config: webhook_server.WebhookConfig | None, kube: Kube
) -> tuple[str, str, str] | None:
    """The webhook server (when enabled), with the shared certificate, publishing into the shipped configuration.
    The shared certificate's files, when there is one (the router credential issuer serves with it too)."""
    if config is None or not config.enabled:
        webhook_server.configure(settings, config)
        return None
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
    return files


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    state = of(memo)
    if state.issuer_server is not None:
        await state.issuer_server.stop()
    if state.elector is not None:
        await state.elector.stop()  # stop acting, then release the Lease: the standby takes over at once
    if state.lease_api is not None:
        await state.lease_api.close()
    for task in state.tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if state.reconciler is not None:
        await state.reconciler.scheduler.stop()
    if state.kube is not None:
        await state.kube.close()
