"""The session's own NetworkPolicy: who may reach its sandbox Pod, and where that Pod may connect to.

The sandbox runtime has no authentication, so the network is what keeps one tenant out of another's
sandbox. Every session with a claim gets one NetworkPolicy, owned by the session (garbage-collected with
it), in its namespace, selecting only its sandbox Pod:

* ingress: pods of the session's own namespace labelled ``agentsession.dev/sandbox-client: "true"``, the
  sandbox router when the operator is told where it runs, and the operator's ``--client-cidr`` blocks
  (say, a gateway outside the cluster); nothing else.
* egress: what every applicable AgentSessionPolicy's ``spec.egress`` allows (:func:`merge_egress`);
  nothing by default. Two kinds of ranges are cut out of every allowed CIDR that contains them:

  - link-local and the cloud metadata services (:data:`METADATA_CIDRS`): always; an allowed CIDR
    inside one of them opens nothing (no policy may reopen them);
  - the private ranges (:data:`PRIVATE_CIDRS`: nodes, the VPC, most clusters) and the cluster's own pod
    and Service ranges (``--cluster-cidr``, in addition to the private ones): unless the allowed CIDR
    lies inside one of them, which is an explicit allowance (say ``10.1.2.0/24`` for a database).

NetworkPolicies add up: another policy selecting the same Pod (say, a SandboxTemplate's managed one)
can only widen this. A template should leave the Pod closed (``networkPolicy: {}``) and let this one
open what the session needs.

Which Pod: agent-sandbox labels a claimed Sandbox's Pod ``agents.x-k8s.io/claim-uid: <claim UID>``, on a
cold start (in the Pod it creates) and on a warm-pool adoption (it relabels the adopted Pod). That label is
unique to the claim, known as soon as the claim exists (so the policy can precede the Pod of a cold start),
and agent-sandbox never copies ``agents.x-k8s.io/`` keys from a template or a claim, so a tenant cannot
put it on its sandbox through either. A tenant can put it on another pod of its own namespace; that only
subjects that pod to this policy too.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agentsession_api import names
from agentsession_operator import constants
from agentsession_operator.decisions.desired import identifying_labels
from agentsession_operator.decisions.ownership import is_owned_by, session_owner_reference
from agentsession_operator.decisions.policy_merge import Sourced
from agentsession_operator.decisions.template_policy import TemplatePolicy

API_VERSION: Final = "networking.k8s.io/v1"
KIND: Final = "NetworkPolicy"
METADATA_CIDRS: Final = (
    "169.254.0.0/16",  # IPv4 link-local: AWS/GCP/Azure/OCI/... metadata at .169.254, ECS credentials at .170.2
    "168.63.129.16/32",  # Azure's WireServer (a public address)
    "100.100.100.200/32",  # Alibaba Cloud's metadata (inside 100.64/10, named so no allowance of that reopens it)
    "fe80::/10",  # IPv6 link-local
    "fd00:ec2::/32",  # AWS's IPv6 metadata, DNS and NTP (fd00:ec2::254, ::253, ::123)
)
"""Link-local and cloud metadata services: never reachable from a sandbox, whatever a policy allows."""
PRIVATE_CIDRS: Final = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
"""Private ranges (RFC 1918, shared address space, IPv6 unique local): nodes, the VPC, and usually the
cluster; closed unless an allowed CIDR lies inside one. ``--cluster-cidr`` adds to these."""
DNS_PEER: Final = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
DNS_PORTS: Final = ({"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53})
NAME_PREFIX: Final = "agentsession-"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class RouterPeer:
    """Where the sandbox router runs: its namespace and its pods' labels."""

    namespace: str
    labels: Mapping[str, str]


@dataclass(frozen=True)
class NetworkSettings:
    """The operator's view of the cluster network (its flags)."""

    cluster_cidrs: tuple[str, ...] = ()
    """The cluster's pod and Service ranges (``--cluster-cidr``), closed in addition to :data:`PRIVATE_CIDRS`."""
    router: RouterPeer | None = None
    client_cidrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Egress:
    """Egress after every applicable policy: CIDRs, ports (None: any port) and DNS."""

    cidrs: tuple[str, ...] = ()
    ports: tuple[tuple[str, int], ...] | None = None
    dns: bool = False
    policies: tuple[str, ...] = ()


NO_EGRESS: Final = Egress()


def parse_router(text: str) -> RouterPeer:
    """``NAMESPACE/key=value[,key=value]`` (the --sandbox-router flag)."""
    namespace, _, selector = text.partition("/")
    labels = dict(item.split("=", 1) for item in selector.split(",") if "=" in item)
    if not namespace or not labels:
        raise ValueError(
            f"{text!r}: expected NAMESPACE/key=value[,key=value], e.g. agent-sandbox-system/app=sandbox-router"
        )
    return RouterPeer(namespace, labels)


def _networks(texts: Iterable[str]) -> list[Network]:
    return [network for network in map(_network, texts) if network is not None]


@functools.lru_cache(maxsize=1024)
def _network(text: str) -> Network | None:
    """One CIDR, parsed once (every pass judges the egress of its session: parsing the same few CIDRs was
    3 % of the operator's CPU while sessions were created). Networks are immutable: sharing them is safe."""
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None  # admission refuses these (CEL isCIDR); never let one break the policy


def _intersect(left: Sequence[Network], right: Sequence[Network]) -> list[Network]:
    """CIDRs in both lists: of each nested pair the smaller one (CIDRs are nested or disjoint)."""
    out: list[Network] = []
    for a in left:
        for b in right:
            if a.version != b.version:
                continue
            if a.subnet_of(b):  # type: ignore[arg-type]
                out.append(a)
            elif b.subnet_of(a):  # type: ignore[arg-type]
                out.append(b)
    return sorted(set(out), key=lambda n: (n.version, n.network_address, n.prefixlen))


def _ports(section: Mapping[str, Any]) -> frozenset[tuple[str, int]] | None:
    ports = section.get("ports")
    if ports is None:
        return None
    return frozenset((str(p.get("protocol") or "TCP"), int(p["port"])) for p in ports if isinstance(p, Mapping))


def merge_egress(sections: Sequence[Sourced[Mapping[str, Any]]]) -> Egress:
    """Each policy's ``spec.egress`` is a constraint of its own: only what all of them allow.

    CIDRs: the intersection; ports: the intersection of the lists given (unset: any port); DNS: on when a
    policy says true and none says false. No section: :data:`NO_EGRESS`.
    """
    if not sections:
        return NO_EGRESS
    cidrs: list[Network] | None = None
    ports: frozenset[tuple[str, int]] | None = None
    dns: list[bool] = []
    for sourced in sections:
        section = sourced.value
        mine = _networks(section.get("allowCIDRs") or [])
        cidrs = mine if cidrs is None else _intersect(cidrs, mine)
        theirs = _ports(section)
        if theirs is not None:
            ports = theirs if ports is None else ports & theirs
        if section.get("dns") is not None:
            dns.append(bool(section["dns"]))
    return Egress(
        cidrs=tuple(str(n) for n in cidrs or []),
        ports=None if ports is None else tuple(sorted(ports)),
        dns=bool(dns) and all(dns),
        policies=tuple(s.policy for s in sections),
    )


def _ip_block(allowed: Network, closed: Sequence[Network]) -> dict[str, Any] | None:
    """``allowed`` minus every closed range strictly inside it; None when ``allowed`` lies in a link-local
    or metadata range (never opened)."""
    metadata = _networks(METADATA_CIDRS)
    if any(allowed.version == m.version and allowed.subnet_of(m) for m in metadata):  # type: ignore[arg-type]
        return None
    # Each closed range by name, even one inside another (100.100.100.200 in 100.64/10): the stored policy
    # shows every cut-out, and an allowance of the wider one keeps the narrower.
    excepts = sorted(
        {str(c) for c in [*closed, *metadata] if c.version == allowed.version and c != allowed and c.subnet_of(allowed)}  # type: ignore[arg-type]
    )
    block: dict[str, Any] = {"cidr": str(allowed)}
    if excepts:
        block["except"] = excepts
    return block


def egress_rules(egress: Egress, cluster_cidrs: Sequence[str]) -> list[dict[str, Any]]:
    """The NetworkPolicy egress rules for ``egress`` (an empty list denies all egress); ``cluster_cidrs``
    are closed in addition to the private ranges, never instead of them."""
    rules: list[dict[str, Any]] = []
    closed = _networks(dict.fromkeys((*PRIVATE_CIDRS, *cluster_cidrs)))
    blocks = [b for b in (_ip_block(n, closed) for n in _networks(egress.cidrs)) if b is not None]
    # An empty ports list in a NetworkPolicy means every port: a port intersection that came out empty
    # opens nothing instead.
    if blocks and egress.ports != ():
        rule: dict[str, Any] = {"to": [{"ipBlock": block} for block in blocks]}
        if egress.ports is not None:
            rule["ports"] = [{"protocol": protocol, "port": port} for protocol, port in egress.ports]
        rules.append(rule)
    if egress.dns:
        rules.append({"to": [dict(DNS_PEER)], "ports": [dict(p) for p in DNS_PORTS]})
    return rules


def ingress_rules(settings: NetworkSettings) -> list[dict[str, Any]]:
    """Client pods of the policy's own namespace (a podSelector without namespaceSelector), the router, and
    the configured client CIDRs; any port (templates choose their runtime's ports)."""
    peers: list[dict[str, Any]] = [{"podSelector": {"matchLabels": {names.LABEL_SANDBOX_CLIENT: "true"}}}]
    if settings.router is not None:
        peers.append(
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": settings.router.namespace}},
                "podSelector": {"matchLabels": dict(settings.router.labels)},
            }
        )
    peers += [{"ipBlock": {"cidr": str(n)}} for n in _networks(settings.client_cidrs)]
    return [{"from": peers}]


def policy_name(claim_name: str) -> str:
    """``agentsession-<claim>``: the claim name is at most 63 characters, so this is a valid name."""
    return f"{NAME_PREFIX}{claim_name}"


def desired_network_policy(
    session: Mapping[str, Any], claim: Mapping[str, Any], egress: Egress, settings: NetworkSettings
) -> dict[str, Any]:
    """The NetworkPolicy for ``session`` whose claim is ``claim`` (which must carry its UID)."""
    meta = session.get("metadata") or {}
    claim_meta = claim.get("metadata") or {}
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": {constants.SANDBOX_CLAIM_UID_LABEL: claim_meta["uid"]}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": ingress_rules(settings),
    }
    egress_list = egress_rules(egress, settings.cluster_cidrs)
    if egress_list:  # none: left out, as the API server stores it (Egress in policyTypes denies all)
        spec["egress"] = egress_list
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": policy_name(claim_meta["name"]),
            "namespace": meta["namespace"],
            "labels": identifying_labels(session),
            "ownerReferences": [session_owner_reference(session)],
        },
        "spec": spec,
    }


@dataclass(frozen=True)
class Isolation:
    """What the reconciler saw of the session's NetworkPolicy, and the operator's network settings."""

    settings: NetworkSettings = field(default_factory=NetworkSettings)
    current: Mapping[str, Any] | None = None
    """The NetworkPolicy named :func:`policy_name` in the session's namespace, if any."""
    template: TemplatePolicy | None = None
    """The managed NetworkPolicy of the template behind the session's claim (decisions/template_policy.py)."""


def host_network(sandbox: Mapping[str, Any] | None) -> bool:
    """The Sandbox's pod runs in the node's network namespace: no NetworkPolicy applies to it."""
    template = ((sandbox or {}).get("spec") or {}).get("podTemplate") or {}
    return bool((template.get("spec") or {}).get("hostNetwork"))


def in_place(current: Mapping[str, Any] | None, desired: Mapping[str, Any], session_uid: str | None) -> bool:
    """The session's own policy exists with the desired spec and labels."""
    if current is None or not is_owned_by(current, session_uid):
        return False
    labels = (current.get("metadata") or {}).get("labels") or {}
    wanted = desired["metadata"]["labels"]
    return current.get("spec") == desired["spec"] and all(labels.get(k) == v for k, v in wanted.items())


def describe(egress: Egress) -> str:
    """One line for the NetworkIsolated condition's message."""
    parts = []
    if egress.cidrs and egress.ports != ():
        ports = "any port" if egress.ports is None else ", ".join(f"{p}/{proto}" for proto, p in egress.ports)
        parts.append(f"{', '.join(egress.cidrs)} on {ports}")
    if egress.dns:
        parts.append("cluster DNS")
    out = "; ".join(parts) if parts else "nothing"
    return f"ingress only from this namespace's {names.LABEL_SANDBOX_CLIENT} pods; egress to {out}"
