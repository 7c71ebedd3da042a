"""The admission webhook's two API-side duties: the shared certificate (one Secret) and publishing the
server's clientConfig into the shipped ValidatingWebhookConfiguration.

Both only read and patch one named object each (RBAC ``get``/``patch`` by ``resourceNames``): the
Secret and the configuration come with config/ (or the chart), so the operator never creates either.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping

import kopf

from agentsession_operator.admission import server as webhook_server
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube.client import Kube

_log = logger(component="webhook")


class CertificateUnavailable(RuntimeError):
    """The Secret is missing, or holds no usable certificate and this operator may not fill it."""


async def shared_certificate(
    kube: Kube,
    namespace: str,
    name: str,
    server_names: list[str],
    generate: bool,
    attempts: int = 30,
    required: list[str] | None = None,
) -> webhook_server.CertBundle:
    """The certificate every replica serves: read from the Secret, filled (or renewed) there once.

    ``required`` (default ``server_names``): the names a certificate must carry to be used; a new one
    carries all of ``server_names``. Replicas starting together race with the Secret's resourceVersion:
    one write wins, the others read the winner's certificate. A provided Secret (cert-manager) is waited
    for, never written.
    """
    for _ in range(attempts):
        found = await kube.get_secret_data(namespace, name)
        if found is None:
            raise CertificateUnavailable(
                f"Secret {namespace}/{name} not found: it is part of config/ (or the chart); apply it"
            )
        data, version = found
        bundle = webhook_server.CertBundle.from_secret_data(data)
        why = webhook_server.unusable(bundle, required or server_names, dt.datetime.now(dt.UTC))
        if why is None and bundle is not None:
            return bundle
        if not generate:
            _log.warning("waiting for the webhook certificate", secret=f"{namespace}/{name}", reason=why)
            await asyncio.sleep(2)
            continue
        fresh = webhook_server.issue(server_names, previous_ca=bundle.ca if bundle is not None else None)
        if await kube.fill_secret(namespace, name, fresh.secret_data(), version):
            _log.info("webhook certificate written", secret=f"{namespace}/{name}", reason=why)
            return fresh
        # Another replica wrote first: read its certificate.
    raise CertificateUnavailable(f"no usable certificate in Secret {namespace}/{name} after {attempts} attempts")


def publisher(
    kube: Kube,
    configuration: str,
    hooks: Mapping[str, str],
    ca_bundle: bytes | None,
    attempts: int = 10,
    retry_delay: float = 3.0,
) -> webhook_server.Publish:
    """A coroutine function for :class:`webhook_server.PublishingWebhookServer`: patch each clientConfig in."""

    async def publish(client_config: kopf.WebhookClientConfig) -> None:
        patch = webhook_server.configuration_patch(client_config, hooks, ca_bundle)
        for attempt in range(1, attempts + 1):
            try:
                found = await kube.patch_validating_webhooks(configuration, patch)
            except Exception as exc:  # never end the webhook server (a kopf root task) over this
                _log.warning("patching the webhook configuration failed", attempt=attempt, error=str(exc)[:300])
                await asyncio.sleep(retry_delay)
                continue
            if found:
                _log.info("webhook configuration patched", configuration=configuration, webhooks=list(hooks))
            else:
                _log.error(
                    "webhook configuration not found: admission is not enforced until it is applied (config/)",
                    configuration=configuration,
                )
            return
        # The configuration keeps what it had: after a restart, the same Service and CA bundle.
        _log.error("could not patch the webhook configuration", configuration=configuration, attempts=attempts)

    return publish
