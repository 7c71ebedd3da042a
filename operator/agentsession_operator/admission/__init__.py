"""Admission, one feature room: the validating webhook from its rules to its server.

- ``rules``: what a session's CREATE or UPDATE is refused for (pure: policies, forks, caps, relabels that
  leave a policy), the same rules the reconciler holds a running session to;
- ``handler``: the kopf validating handler (registered by the CLI only when the webhook is served), the
  caller check and the reads rules need;
- ``server``: the webhook server's configuration, its certificate files and the clientConfig patch;
- ``certificate``: the certificate every replica serves, shared through one Secret, and publishing the
  clientConfig into the shipped ValidatingWebhookConfiguration.

The room reads the API through ``kube.client`` and decides with ``decisions``; nothing below it imports it.
"""
