"""decisions.network: each session's own NetworkPolicy (issue 11 item 1), and the action that applies it."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from agentsession_api import names, phases
from agentsession_operator import cli
from agentsession_operator.decisions import network
from agentsession_operator.decisions.actions import ApplyNetworkPolicy, PatchStatus, reconcile_actions
from agentsession_operator.decisions.policy_merge import merge_policies

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
Make = Callable[..., dict[str, Any]]
CLUSTER = ("198.18.32.0/19", "198.19.16.0/20")
SETTINGS = network.NetworkSettings(cluster_cidrs=CLUSTER)


def policy(name: str, egress: dict[str, Any] | None) -> dict[str, Any]:
    spec = {"egress": egress} if egress is not None else {}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def egress_of(*policies: dict[str, Any]) -> network.Egress:
    return network.merge_egress(merge_policies(policies).egress)


def desired(make_session: Make, make_claim: Make, egress: network.Egress = network.NO_EGRESS, **kw: Any) -> Any:
    return network.desired_network_policy(make_session(), make_claim(), egress, network.NetworkSettings(**kw))


# --- who may reach the sandbox -------------------------------------------------------------------------
def test_policy_selects_only_the_claims_pod_and_is_owned_by_the_session(make_session: Make, make_claim: Make) -> None:
    session, claim = make_session(), make_claim()
    manifest = network.desired_network_policy(session, claim, network.NO_EGRESS, SETTINGS)
    assert manifest["metadata"]["namespace"] == "ns"
    assert manifest["metadata"]["name"] == "agentsession-demo"
    (owner,) = manifest["metadata"]["ownerReferences"]
    assert owner["uid"] == session["metadata"]["uid"] and owner["controller"] is True
    assert owner["kind"] == "AgentSession"
    # The claim's UID: agent-sandbox puts it on the Pod of a cold start and of an adopted warm Sandbox.
    assert manifest["spec"]["podSelector"] == {"matchLabels": {"agents.x-k8s.io/claim-uid": claim["metadata"]["uid"]}}
    assert manifest["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_ingress_admits_only_client_pods_of_the_sessions_own_namespace(make_session: Make, make_claim: Make) -> None:
    (rule,) = desired(make_session, make_claim)["spec"]["ingress"]
    # A podSelector alone means "in the policy's namespace": no namespaceSelector may widen it.
    assert rule == {"from": [{"podSelector": {"matchLabels": {names.LABEL_SANDBOX_CLIENT: "true"}}}]}
    assert "ports" not in rule


def test_ingress_admits_the_configured_router_and_client_cidrs(make_session: Make, make_claim: Make) -> None:
    router = network.parse_router("agent-sandbox-system/app=sandbox-router")
    (rule,) = desired(make_session, make_claim, router=router, client_cidrs=("198.19.255.5/32",))["spec"]["ingress"]
    assert rule["from"][1] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agent-sandbox-system"}},
        "podSelector": {"matchLabels": {"app": "sandbox-router"}},
    }
    assert rule["from"][2] == {"ipBlock": {"cidr": "198.19.255.5/32"}}
    assert len(rule["from"]) == 3


@pytest.mark.parametrize("text", ["", "ns", "ns/", "/app=x", "ns/app"])
def test_router_flag_is_checked(text: str) -> None:
    with pytest.raises(ValueError):
        network.parse_router(text)


# --- where the sandbox may connect to --------------------------------------------------------------------
def test_no_policy_means_no_egress_at_all(make_session: Make, make_claim: Make) -> None:
    assert egress_of() == network.NO_EGRESS
    assert egress_of(policy("limits-only", None)) == network.NO_EGRESS
    spec = desired(make_session, make_claim)["spec"]
    # Egress in policyTypes and no egress rule: deny all (the API server drops an empty list: leave it out,
    # or the stored policy never equals the desired one and every pass rewrites it).
    assert "Egress" in spec["policyTypes"] and "egress" not in spec


def test_dns_is_off_unless_allowed() -> None:
    assert network.egress_rules(egress_of(policy("p", {"allowCIDRs": ["198.18.32.7/32"]})), CLUSTER) == [
        {"to": [{"ipBlock": {"cidr": "198.18.32.7/32"}}]}
    ]
    (dns,) = network.egress_rules(egress_of(policy("p", {"dns": True})), CLUSTER)
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    # One policy saying false wins over another saying true.
    assert egress_of(policy("a", {"dns": True}), policy("b", {"dns": False})).dns is False


def test_wide_cidr_never_opens_the_metadata_address_or_the_cluster_network() -> None:
    egress = egress_of(policy("p", {"allowCIDRs": ["0.0.0.0/0", "::/0"], "ports": [{"port": 443}]}))
    rule = network.egress_rules(egress, CLUSTER)[0]
    v4, v6 = (peer["ipBlock"] for peer in rule["to"])
    assert v4["cidr"] == "0.0.0.0/0"
    private_v4 = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
    link_local_v4 = ("169.254.0.0/16", "168.63.129.16/32", "100.100.100.200/32")
    assert set(v4["except"]) == {*link_local_v4, *private_v4, *CLUSTER}
    assert v6 == {"cidr": "::/0", "except": ["fc00::/7", "fd00:ec2::/32", "fe80::/10"]}
    assert rule["ports"] == [{"protocol": "TCP", "port": 443}]


def test_without_cluster_cidrs_every_private_range_is_closed() -> None:
    rule = network.egress_rules(egress_of(policy("p", {"allowCIDRs": ["0.0.0.0/0"]})), ())
    assert set(rule[0]["to"][0]["ipBlock"]["except"]) >= {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}


def test_a_cidr_inside_the_cluster_network_is_an_explicit_allowance() -> None:
    rule = network.egress_rules(egress_of(policy("p", {"allowCIDRs": ["198.18.32.7/32"]})), CLUSTER)[0]
    assert rule["to"] == [{"ipBlock": {"cidr": "198.18.32.7/32"}}]


@pytest.mark.parametrize("cidr", ["169.254.169.254/32", "fd00:ec2::254/128"])
def test_the_metadata_address_alone_is_never_opened(cidr: str) -> None:
    assert network.egress_rules(egress_of(policy("p", {"allowCIDRs": [cidr]})), CLUSTER) == []


def test_several_policies_allow_only_what_all_of_them_allow() -> None:
    wide = policy("a-wide", {"allowCIDRs": ["198.18.0.0/15", "203.0.113.0/24"], "ports": [{"port": 80}, {"port": 443}]})
    narrow = policy(
        "b-narrow", {"allowCIDRs": ["198.18.32.0/24"], "ports": [{"port": 443}, {"port": 53, "protocol": "UDP"}]}
    )
    egress = egress_of(narrow, wide)
    assert egress.cidrs == ("198.18.32.0/24",)
    assert egress.ports == (("TCP", 443),)
    assert egress.policies == ("a-wide", "b-narrow")
    # Disjoint CIDRs: nothing.
    assert egress_of(wide, policy("c", {"allowCIDRs": ["192.0.2.0/24"]})).cidrs == ()


def test_disjoint_port_lists_open_nothing_not_every_port() -> None:
    a = policy("a", {"allowCIDRs": ["198.18.32.0/24"], "ports": [{"port": 80}]})
    b = policy("b", {"allowCIDRs": ["198.18.32.0/24"], "ports": [{"port": 443}]})
    egress = egress_of(a, b)
    assert egress.ports == ()
    # An empty ports list in a NetworkPolicy would mean every port: no rule at all instead.
    assert network.egress_rules(egress, CLUSTER) == []


def test_unparsable_cidrs_are_skipped_not_fatal() -> None:
    egress = egress_of(policy("p", {"allowCIDRs": ["bogus", "198.18.32.7/32"]}))
    assert egress.cidrs == ("198.18.32.7/32",)


# --- the action and the condition --------------------------------------------------------------------------
def ready(make_claim: Make) -> dict[str, Any]:
    return make_claim(sandbox_name="demo", ready=("True", "DependenciesReady", ""), pod_ips=["198.18.32.9"])


def isolated(actions: list[Any]) -> dict[str, Any]:
    (patch,) = [a.patch for a in actions if isinstance(a, PatchStatus)]
    return next(c for c in patch["conditions"] if c["type"] == phases.COND_NETWORK_ISOLATED)


def test_a_claimed_session_gets_its_policy_and_network_isolated(make_session: Make, make_claim: Make) -> None:
    isolation = network.Isolation(SETTINGS, None)
    actions = reconcile_actions(make_session(), ready(make_claim), None, T0, isolation=isolation)
    (apply,) = [a for a in actions if isinstance(a, ApplyNetworkPolicy)]
    assert apply.current is None and apply.manifest["metadata"]["name"] == "agentsession-demo"
    assert isolated(actions)["status"] == "True"


def test_policy_in_place_is_left_alone_and_a_changed_one_is_replaced(make_session: Make, make_claim: Make) -> None:
    session, claim = make_session(), ready(make_claim)
    wanted = network.desired_network_policy(session, claim, network.NO_EGRESS, SETTINGS)
    current = {**wanted, "metadata": {**wanted["metadata"], "resourceVersion": "7"}}
    actions = reconcile_actions(session, claim, None, T0, isolation=network.Isolation(SETTINGS, current))
    assert not [a for a in actions if isinstance(a, ApplyNetworkPolicy)]
    # Someone opened ingress to every namespace: the session's pass puts its own spec back.
    tampered = {**current, "spec": {**wanted["spec"], "ingress": [{}]}}
    actions = reconcile_actions(session, claim, None, T0, isolation=network.Isolation(SETTINGS, tampered))
    (apply,) = [a for a in actions if isinstance(a, ApplyNetworkPolicy)]
    assert apply.current == tampered and apply.manifest["spec"] == wanted["spec"]


def test_a_policy_change_reaches_the_network_policy(make_session: Make, make_claim: Make) -> None:
    session, claim = make_session(), ready(make_claim)
    current = network.desired_network_policy(session, claim, network.NO_EGRESS, SETTINGS)
    effective = merge_policies([policy("p", {"allowCIDRs": ["198.18.32.7/32"], "ports": [{"port": 8080}]})])
    actions = reconcile_actions(
        session, claim, None, T0, effective=effective, isolation=network.Isolation(SETTINGS, current)
    )
    (apply,) = [a for a in actions if isinstance(a, ApplyNetworkPolicy)]
    assert apply.manifest["spec"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "198.18.32.7/32"}}], "ports": [{"protocol": "TCP", "port": 8080}]}
    ]
    assert "198.18.32.7/32 on 8080/TCP" in isolated(actions)["message"]


def test_a_foreign_policy_of_the_same_name_is_never_overwritten(make_session: Make, make_claim: Make) -> None:
    session, claim = make_session(), ready(make_claim)
    foreign = network.desired_network_policy(session, claim, network.NO_EGRESS, SETTINGS)
    foreign = {**foreign, "metadata": {**foreign["metadata"], "ownerReferences": []}}
    actions = reconcile_actions(session, claim, None, T0, isolation=network.Isolation(SETTINGS, foreign))
    assert not [a for a in actions if isinstance(a, ApplyNetworkPolicy)]
    cond = isolated(actions)
    assert cond["status"] == "False" and cond["reason"] == "NameConflict"


def test_no_claim_no_policy_and_no_condition(make_session: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}})
    actions = reconcile_actions(session, None, None, T0, isolation=network.Isolation(SETTINGS, None))
    assert not [a for a in actions if isinstance(a, ApplyNetworkPolicy)]
    (patch,) = [a.patch for a in actions if isinstance(a, PatchStatus)]
    assert phases.COND_NETWORK_ISOLATED not in {c["type"] for c in patch["conditions"]}


def test_a_foreign_claim_gets_no_policy(make_session: Make, make_claim: Make) -> None:
    claim = make_claim(owner_uid="someone-else", sandbox_name="demo", ready=("True", "DependenciesReady", ""))
    actions = reconcile_actions(make_session(), claim, None, T0, isolation=network.Isolation(SETTINGS, None))
    assert not [a for a in actions if isinstance(a, ApplyNetworkPolicy)]


# --- issue 28 item 8: the always-closed ranges ------------------------------------------------------------
# Link-local (every cloud's metadata and IMDS-like services, NodeLocal DNSCache's 169.254.20.10, the node's
# own link-local addresses), Azure's WireServer, Alibaba's metadata, AWS's IPv6 IMDS range.
CUT_OUTS = ("169.254.0.0/16", "168.63.129.16/32", "100.100.100.200/32", "fe80::/10", "fd00:ec2::/32")
WIDE = ("0.0.0.0/0", "128.0.0.0/1", "64.0.0.0/2", "::/0", "fc00::/7", "fe80::/9", "100.64.0.0/10", "169.0.0.0/8")


def flagged(cidrs: tuple[str, ...]) -> tuple[str, ...]:
    """The cluster ranges the operator passes to the builder when started with these --cluster-cidr flags."""
    return cli.parse_args([f"--cluster-cidr={c}" for c in cidrs]).network_settings().cluster_cidrs


def ip_blocks(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [peer["ipBlock"] for rule in rules for peer in rule.get("to", []) if "ipBlock" in peer]


def opened(rules: list[dict[str, Any]], address: str) -> bool:
    """Whether ``address`` is inside some ipBlock's cidr and outside all of its excepts."""
    ip = ipaddress.ip_address(address)
    return any(
        ip in ipaddress.ip_network(block["cidr"])
        and not any(ip in ipaddress.ip_network(e) for e in block.get("except", []))
        for block in ip_blocks(rules)
        if ipaddress.ip_network(block["cidr"]).version == ip.version
    )


@pytest.mark.parametrize("cluster", [(), CLUSTER, ("10.96.0.0/12",)], ids=["default", "test-ranges", "10.96/12"])
@pytest.mark.parametrize("allowed", WIDE)
def test_every_link_local_and_metadata_range_is_cut_out_of_every_allowance_containing_it(
    allowed: str, cluster: tuple[str, ...]
) -> None:
    # Each cut-out by name in the except list (not only covered by a wider private range): a reader of the
    # stored NetworkPolicy sees it, and an allowance of that private range (say 100.64.0.0/10) keeps it.
    cidrs = flagged(cluster)
    (block,) = ip_blocks(network.egress_rules(egress_of(policy("p", {"allowCIDRs": [allowed]})), cidrs))
    wide = ipaddress.ip_network(allowed)
    inside = [c for c in CUT_OUTS if (cut := ipaddress.ip_network(c)).version == wide.version and cut.subnet_of(wide)]  # type: ignore[arg-type]
    assert inside, allowed
    assert set(inside) <= set(block["except"])


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",
        "169.254.170.2",
        "169.254.20.10",
        "168.63.129.16",
        "100.100.100.200",
        "fe80::1",
        "fd00:ec2::254",
        "fd00:ec2::23",
    ],
)
def test_no_internet_egress_reaches_a_link_local_or_metadata_address(address: str) -> None:
    egress = egress_of(policy("p", {"allowCIDRs": ["0.0.0.0/0", "::/0"]}))
    for cluster in ((), CLUSTER, ("10.96.0.0/12", "fd00:10:96::/112")):
        assert not opened(network.egress_rules(egress, flagged(cluster)), address), cluster


@pytest.mark.parametrize(
    "allowed",
    [
        "169.254.20.10/32",
        "169.254.170.2/32",
        "169.254.0.0/16",
        "168.63.129.16/32",
        "100.100.100.200/32",
        "fe80::1/128",
        "fd00:ec2::23/128",
        "fd00:ec2::/32",
    ],
)
def test_an_allowance_never_reopens_a_link_local_or_metadata_range(allowed: str) -> None:
    # Unlike a private range, these have no explicit allowance: a policy naming one opens nothing.
    assert network.egress_rules(egress_of(policy("p", {"allowCIDRs": [allowed]})), flagged(CLUSTER)) == []


def test_cluster_cidr_adds_to_the_private_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTER_CIDRS", raising=False)
    settings = cli.parse_args(["--cluster-cidr=10.96.0.0/12", "--cluster-cidr=fd00:10:96::/112"]).network_settings()
    egress = egress_of(policy("p", {"allowCIDRs": ["0.0.0.0/0", "::/0"]}))
    rules = network.egress_rules(egress, settings.cluster_cidrs)
    # Nodes and the VPC (10.0.0.5, 192.168.1.1, ...) stay closed: the flag names the cluster's ranges in
    # addition to the private ones, it does not replace them.
    for address in ("10.0.0.5", "10.96.0.1", "192.168.1.1", "172.16.0.1", "100.64.0.1", "fd12::1", "fd00:10:96::1"):
        assert not opened(rules, address), address
    assert opened(rules, "93.184.215.14") and opened(rules, "2606:2800:21f:cb07:6820:80da:af6b:8b2c")
    v4, v6 = ip_blocks(rules)
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "10.96.0.0/12"} <= set(v4["except"])
    assert {"fc00::/7", "fd00:10:96::/112"} <= set(v6["except"])
    # And the same through the operator's NetworkPolicy builder.
    manifest = network.desired_network_policy(
        {"metadata": {"name": "s", "namespace": "ns", "uid": "u"}},
        {"metadata": {"name": "c", "uid": "cu"}},
        egress,
        settings,
    )
    assert not opened(manifest["spec"]["egress"], "10.0.0.5") and not opened(manifest["spec"]["egress"], "192.168.1.1")


def test_an_allowance_inside_a_private_range_still_opens_it_but_not_the_cluster_ranges_inside() -> None:
    cidrs = flagged(("10.96.0.0/12",))
    # Inside a private range (and outside the cluster's): opened as asked, nothing cut out.
    (block,) = ip_blocks(network.egress_rules(egress_of(policy("p", {"allowCIDRs": ["10.1.2.0/24"]})), cidrs))
    assert block == {"cidr": "10.1.2.0/24"}
    # The whole private range: opened, but the cluster's ranges inside it stay cut out.
    (block,) = ip_blocks(network.egress_rules(egress_of(policy("p", {"allowCIDRs": ["10.0.0.0/8"]})), cidrs))
    assert block == {"cidr": "10.0.0.0/8", "except": ["10.96.0.0/12"]}
    # Inside a cluster range: an explicit allowance, as before.
    (block,) = ip_blocks(network.egress_rules(egress_of(policy("p", {"allowCIDRs": ["10.96.0.10/32"]})), cidrs))
    assert block == {"cidr": "10.96.0.10/32"}


def test_a_host_network_sandbox_is_not_network_isolated(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    """Issue 28 item 9. A template with `hostNetwork: true` puts the pod in the node's network namespace,
    where no NetworkPolicy applies: NetworkIsolated=True there was a claim nobody checked."""
    sandbox = make_sandbox(pod_ips=["198.18.32.9"])
    sandbox["spec"]["podTemplate"] = {"spec": {"hostNetwork": True, "containers": [{"name": "c"}]}}
    actions = reconcile_actions(
        make_session(), ready(make_claim), sandbox, T0, isolation=network.Isolation(SETTINGS, None)
    )
    condition = isolated(actions)
    assert (condition["status"], condition["reason"]) == ("False", "HostNetwork"), condition
    assert any(isinstance(a, ApplyNetworkPolicy) for a in actions)  # still in place for when it stops


def test_the_cache_keeps_host_network_of_a_pod_template_it_otherwise_drops(make_sandbox: Make) -> None:
    from agentsession_operator.kube.cache import Cache

    cache = Cache()
    sandbox = make_sandbox()
    sandbox["metadata"]["resourceVersion"] = "1"
    sandbox["spec"]["podTemplate"] = {"spec": {"hostNetwork": True, "containers": [{"name": "c", "image": "x"}]}}
    cache.remember_sandbox(("ns", "demo"), sandbox)
    kept = cache.sandboxes[("ns", "demo")]
    assert network.host_network(kept) and kept["spec"]["podTemplate"] == {"spec": {"hostNetwork": True}}
