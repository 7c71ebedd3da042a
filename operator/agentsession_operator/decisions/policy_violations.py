"""What a session breaks under its :class:`EffectivePolicy`: :func:`violations`, one sentence each naming
the field, the rule and the policy (admission and reconciliation share them), and
:func:`hibernate_refusals` (admission only).

Which labels the label rules read: ``required`` reads the session's ``metadata.labels`` (what selectors
and ``maxSessionsPerLabel`` see); ``allowedPrefixes`` reads ``spec.labels`` and ``spec.podLabels`` (what
the operator copies onto the claim and Pod); ``values`` reads all three.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import re2  # google-re2: linear time, so a policy cannot stall the loop

from agentsession_api import cel_rules, names, patterns
from agentsession_api.durations import format_duration, parse_duration
from agentsession_api.phases import IdleAction
from agentsession_api.quantities import format_quantity, parse_quantity
from agentsession_api.types import MAX_SESSION_LABELS
from agentsession_api.views import Session
from agentsession_api.views_generated import AgentSessionSpecView
from agentsession_operator.decisions import hibernate, policy_resolve
from agentsession_operator.decisions.policy_merge import EMPTY_POLICY, EffectivePolicy, Sourced
from agentsession_operator.decisions.policy_resolve import recorded_maxima
from agentsession_operator.decisions.resolved import Resolved


def _spec(session: Mapping[str, Any]) -> AgentSessionSpecView:
    return Session(session).spec_view


@functools.lru_cache(maxsize=1024)
def _compiled(regex: str) -> tuple[Any, str | None]:
    """RE2, never Python's re: a policy's pattern runs in time linear in the value, whatever the pattern
    (Python's backtracking took minutes on ``([a-z0-9]+-?)+`` and blocked the event loop). RE2 refuses
    backreferences and lookarounds: such a pattern is reported as invalid."""
    try:
        return re2.compile(regex), None
    except re2.error as err:
        text = err.args[0] if err.args else err
        return None, text.decode(errors="replace") if isinstance(text, bytes) else str(text)


def regex_error(regex: str) -> str | None:
    return _compiled(regex)[1]


def _pod_label_violations(
    spec: AgentSessionSpecView, effective: EffectivePolicy, resolved: Resolved, domains: Sequence[str]
) -> list[str]:
    allowed = " or ".join(domains) + " (or a subdomain)"
    found = []
    own = spec.pod_labels or {}
    for key in sorted(resolved.pod_labels):
        where = "spec.podLabels" if key in own else f"default podLabels {effective.default_pod_labels[key].origin()}"
        domain = patterns.key_domain(key)
        if domain is None:
            found.append(
                f'{where} key "{key}" has no domain prefix: agent-sandbox only accepts pod labels under {allowed}, '
                f'e.g. "{domains[0]}/{key}"'
            )
        elif not patterns.in_domain(domain, list(domains)):
            found.append(
                f'{where} key "{key}" uses the domain {domain}, which agent-sandbox does not allow: use {allowed}, '
                "or add the domain to allowed-label-domains in the agent-sandbox-config ConfigMap"
            )
    return found


def _pod_annotation_violations(spec: AgentSessionSpecView) -> list[str]:
    found = []
    for key in sorted(spec.pod_annotations or {}):
        domain = patterns.key_domain(key)
        if (
            domain is not None
            and patterns.in_domain(domain, names.RESTRICTED_ANNOTATION_DOMAINS)
            and key not in names.EXEMPT_ANNOTATION_KEYS
        ):
            found.append(
                f'spec.podAnnotations key "{key}" is in a domain agent-sandbox refuses '
                f"({', '.join(names.RESTRICTED_ANNOTATION_DOMAINS)} and their subdomains)"
            )
    if hibernate.user_names_restore(spec.pod_annotations):
        # The CRD's CEL refuses it too; this covers a session stored before that rule (issue 33).
        found.append(f"spec.podAnnotations key {names.ANNOTATION_RESTORE_FROM} {cel_rules.RESTORE_ANNOTATION_TEXT}")
    return found


def _limit_violations(
    spec: AgentSessionSpecView,
    effective: EffectivePolicy,
    resolved: Resolved,
    running: bool = False,
    recorded: Mapping[str, Sourced[timedelta]] | None = None,
) -> list[str]:
    found = []
    pools = effective.allowed_warm_pools
    if pools is not None and resolved.warm_pool and resolved.warm_pool not in pools.value:
        where = "spec.warmPoolRef.name" if spec.warm_pool_ref.name else "the default warm pool"
        listed = ", ".join(sorted(pools.value)) or "none"
        found.append(f"{where} {resolved.warm_pool} is not an allowed warm pool (allowed: {listed}) {pools.origin()}")
    for key, text, cap in (
        ("ttl", spec.ttl, effective.max_ttl),
        ("idleTimeout", spec.idle_timeout, effective.max_idle_timeout),
    ):
        if text is None:
            continue
        try:
            value = parse_duration(text)
        except ValueError as err:
            found.append(f"spec.{key}: {err}")
            continue
        if running:
            continue  # a running session is held to the caps by resolve() (expiry moves earlier): not stopped
        before = (recorded or {}).get(key)
        if cap is not None and value > cap.value:
            found.append(
                f"spec.{key} {text} exceeds the policy maximum {cap.text or format_duration(cap.value)} {cap.origin()}"
            )
        elif before is not None and value > before.value:
            # The policy allows more now (loosened, or no longer selecting): the maximum that applied stays.
            found.append(
                f"spec.{key} {text} exceeds the maximum {before.text} in force for this session since its sandbox "
                f"was created ({before.policy}): a session's maxima only tighten; delete the session and create "
                "it anew for the new policy's"
            )
    if effective.max_storage is not None:
        total = 0
        for template in spec.volume_claim_templates:
            size = template.spec.resources.requests.storage
            try:
                total += parse_quantity(size) if size is not None else 0
            except ValueError as err:
                found.append(f"spec.volumeClaimTemplates: {err}")
        cap_bytes = effective.max_storage
        if total > cap_bytes.value:
            found.append(
                f"spec.volumeClaimTemplates request {format_quantity(total)} in total, more than the policy maximum "
                f"{cap_bytes.text or format_quantity(cap_bytes.value)} {cap_bytes.origin()}"
            )
    return found


def _env_violations(spec: AgentSessionSpecView, effective: EffectivePolicy) -> list[str]:
    found = []
    for variable in spec.env:
        name = variable.name or ""
        builtin = next((glob for glob in names.DENIED_ENV_DEFAULTS if fnmatch.fnmatchcase(name, glob)), None)
        if builtin is not None:
            found.append(
                f"spec.env {name} is denied by the pattern {builtin} (built in: it would run code inside every "
                "process of the sandbox runtime)"
            )
        for deny in effective.env_deny:
            if fnmatch.fnmatchcase(name, deny.value):
                found.append(f"spec.env {name} is denied by the pattern {deny.value} {deny.origin()}")
        for allow in effective.env_allow:
            if not any(fnmatch.fnmatchcase(name, glob) for glob in allow.value):
                listed = ", ".join(allow.value) or "none"
                found.append(f"spec.env {name} matches none of the allowed patterns ({listed}) {allow.origin()}")
    return found


def _label_count_violations(session: Mapping[str, Any]) -> list[str]:
    """A session over the bound on its own labels (the cached copy keeps one more than the bound)."""
    labels = Session(session).labels
    if len(labels) <= MAX_SESSION_LABELS:
        return []
    return [
        f"metadata.labels has more than {MAX_SESSION_LABELS} labels: at most {MAX_SESSION_LABELS} are allowed on "
        "an AgentSession (every replica of the operator keeps them in memory); keep the ones policies select "
        "on and move the rest to annotations"
    ]


def _reserved_label_violations(spec: AgentSessionSpecView) -> list[str]:
    """The CRD refuses these too; checked here for sessions stored before that rule covered subdomains."""
    found = []
    for key in sorted(spec.labels or {}):
        domain = patterns.key_domain(key)
        if domain is not None and patterns.in_domain(domain, names.RESERVED_LABEL_DOMAINS):
            found.append(
                f'spec.labels key "{key}" is in a domain reserved for the operator and agent-sandbox '
                f"({', '.join(names.RESERVED_LABEL_DOMAINS)} and their subdomains)"
            )
    return found


def _key_violations(
    where: str,
    keys: Iterable[str],
    allow: Sequence[Sourced[tuple[str, ...]]],
    deny: Sequence[Sourced[str]],
) -> list[str]:
    found = []
    for key in sorted(keys):
        for rule in deny:
            if fnmatch.fnmatchcase(key, rule.value):
                found.append(f"{where} key {key} is denied by the pattern {rule.value} {rule.origin()}")
        for allowed in allow:
            if not any(fnmatch.fnmatchcase(key, glob) for glob in allowed.value):
                listed = ", ".join(allowed.value) or "none"
                found.append(f"{where} key {key} matches none of the allowed patterns ({listed}) {allowed.origin()}")
    return found


def _annotation_and_volume_violations(spec: AgentSessionSpecView, effective: EffectivePolicy) -> list[str]:
    """limits.podAnnotations, limits.volumeAnnotations and limits.allowedStorageClasses."""
    found = _key_violations(
        "spec.podAnnotations",
        (spec.pod_annotations or {}).keys(),
        effective.pod_annotation_allow,
        effective.pod_annotation_deny,
    )
    classes = effective.allowed_storage_classes
    for template in spec.volume_claim_templates:
        name = template.metadata.name or "?"
        where = f"spec.volumeClaimTemplates[{name}]"
        found += _key_violations(
            f"{where}.metadata.annotations",
            (template.metadata.annotations or {}).keys(),
            effective.volume_annotation_allow,
            effective.volume_annotation_deny,
        )
        if classes is None:
            continue
        listed = ", ".join(sorted(classes.value)) or "none"
        chosen = template.spec.storage_class_name
        if chosen is None:
            found.append(
                f"{where} leaves storageClassName unset (the cluster default storage class), but only these are "
                f"allowed: {listed} {classes.origin()}"
            )
        elif chosen not in classes.value:
            found.append(
                f"{where}.spec.storageClassName {chosen} is not an allowed storage class (allowed: {listed}) "
                f"{classes.origin()}"
            )
    return found


def hibernate_refusals(session: Mapping[str, Any], effective: EffectivePolicy) -> list[str]:
    """limits.allowHibernate false: a session asking for idleAction Hibernate itself is refused at admission.
    Not a violation at reconcile: a session that has it anyway suspends as Suspend (decisions/hibernate.py)."""
    denied = effective.hibernate_denied
    if denied is None or _spec(session).idle_action != IdleAction.HIBERNATE:
        return []
    return [
        f"spec.idleAction: Hibernate is not allowed (spec.limits.allowHibernate: false) {denied.origin()}; use "
        "Suspend (the workspace volume is kept, the processes are not), or ask for the policy to allow Hibernate"
    ]


def _fork_violations(spec: AgentSessionSpecView, effective: EffectivePolicy, running: bool) -> list[str]:
    """limits.allowForks: false refuses a new fork (a running one is not stopped for it)."""
    denied = effective.forks_denied
    if running or denied is None or not spec.fork_from.name:
        return []
    return [
        f"spec.forkFrom: forks are not allowed (spec.limits.allowForks: false) {denied.origin()}; remove "
        "spec.forkFrom to create a fresh session, or ask for the policy to allow forks"
    ]


def _lineage_violations(effective: EffectivePolicy, running: bool) -> list[str]:
    """A new fork of data whose source's maxTtl is spent: refused (a running one just expires)."""
    left = effective.lineage_max_ttl
    if running or left is None or left.value > timedelta(0):
        return []
    return [
        f"spec.forkFrom: the data it would copy has reached its maxTtl ({left.text}) {left.origin()}: a fork "
        "cannot outlive its source's maximum"
    ]


def _label_violations(session: Mapping[str, Any], effective: EffectivePolicy, resolved: Resolved) -> list[str]:
    found = []
    own_labels: Mapping[str, str] = Session(session).labels
    for required in effective.required_labels:
        if required.value not in own_labels:
            found.append(f"metadata.labels is missing the required label {required.value} {required.origin()}")
    resolved_labels: tuple[tuple[str, Mapping[str, str]], ...] = (
        ("spec.labels", resolved.labels),
        ("spec.podLabels", resolved.pod_labels),
    )
    for where, labels in resolved_labels:
        for key in sorted(labels):
            for prefixes in effective.allowed_prefixes:
                if not any(key.startswith(p) for p in prefixes.value):
                    found.append(
                        f"{where} key {key} does not start with an allowed prefix "
                        f"({', '.join(prefixes.value) or 'none'}) {prefixes.origin()}"
                    )
    for rule in effective.label_values:
        key, regex = rule.value
        error = regex_error(regex)
        for where, labels in (
            ("metadata.labels", own_labels),
            ("spec.labels", resolved.labels),
            ("spec.podLabels", resolved.pod_labels),
        ):
            if key not in labels:
                continue
            if error:
                found.append(
                    f"{where} {key} cannot be checked: the policy pattern {regex!r} is not a valid regular "
                    f"expression ({error}) {rule.origin()}; fix the policy"
                )
            elif not _compiled(regex)[0].fullmatch(labels[key]):
                found.append(f"{where} {key}={labels[key]} does not match the pattern {regex} {rule.origin()}")
    return found


def violations(
    session: Mapping[str, Any],
    effective: EffectivePolicy = EMPTY_POLICY,
    allowed_label_domains: Sequence[str] | None = None,
    *,
    running: bool = False,
    resolved: Resolved | None = None,
) -> list[str]:
    """Every rule the session breaks, one sentence each naming the field, the rule and the policy.

    ``running`` (a claim exists): leaves out ``spec.ttl``/``spec.idleTimeout`` over a maximum, which the
    caps in :func:`policy_resolve.resolve` enforce on a running session without stopping it.

    Includes agent-sandbox's own Pod metadata rules (label domain allowlist, annotation blocklist), which
    would otherwise fail the claim later with the terminal reason InvalidMetadata. ``resolved``: the
    pass's own :func:`policy_resolve.resolve` of ``session`` under ``effective`` (None: resolved here, as
    admission does).
    """
    domains = list(allowed_label_domains or names.DEFAULT_ALLOWED_LABEL_DOMAINS)
    spec = _spec(session)
    resolved = resolved if resolved is not None else policy_resolve.resolve(session, effective)
    return [
        *_label_count_violations(session),
        *_pod_label_violations(spec, effective, resolved, domains),
        *_pod_annotation_violations(spec),
        *_reserved_label_violations(spec),
        *_limit_violations(spec, effective, resolved, running, recorded_maxima(session)),
        *_env_violations(spec, effective),
        *_annotation_and_volume_violations(spec, effective),
        *_fork_violations(spec, effective, running),
        *_lineage_violations(effective, running),
        *_label_violations(session, effective, resolved),
    ]
