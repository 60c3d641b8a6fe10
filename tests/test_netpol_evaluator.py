"""The NetworkPolicy evaluator (tests/netpol.py) against the semantics the API documents, so the
policy tests that rely on it can fail for the right reasons."""

from __future__ import annotations

from typing import Any

import pytest

from tests.netpol import Cluster, External, Pod, PolicyError, matches

A = Pod("a", "ns1", {"app": "a", "tier": "web"}, ip="10.1.0.1", node="n1", ports={"http": 8080})
B = Pod("b", "ns1", {"app": "b"}, ip="10.1.0.2", node="n2")
C = Pod("c", "ns2", {"app": "a"}, ip="10.2.0.3", node="n2")


def _policy(name: str, namespace: str = "ns1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": {}, **spec},
    }


def _cluster(*policies: dict[str, Any]) -> Cluster:
    return Cluster(namespaces={"ns1": {"team": "x"}, "ns2": {"team": "y"}}, policies=policies)


DENY = _policy("deny", policyTypes=["Ingress"])


def test_without_policies_everything_is_allowed() -> None:
    assert _cluster().allowed(B, A, 1234)


def test_default_deny_isolates_only_its_namespace() -> None:
    cluster = _cluster(DENY)
    assert not cluster.allowed(B, A, 8080)
    assert not cluster.allowed(C, A, 8080)
    assert cluster.allowed(A, C, 8080)  # ns2 has no policy


def test_allows_add_up_and_a_non_selecting_policy_does_not_isolate() -> None:
    only_b = _policy("only-b", podSelector={"matchLabels": {"app": "b"}}, ingress=[{}])
    assert _cluster(only_b).allowed(C, A, 1)  # A is not selected: not isolated
    allow_b = _policy(
        "from-b",
        podSelector={"matchLabels": {"app": "a"}},
        ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "b"}}}]}],
    )
    cluster = _cluster(DENY, allow_b)
    assert cluster.allowed(B, A, 9)
    assert not cluster.allowed(C, A, 9)  # podSelector alone: the policy's own namespace


def test_namespace_and_pod_selector_in_one_peer_both_apply() -> None:
    both = _policy(
        "both",
        ingress=[
            {
                "from": [
                    {
                        "namespaceSelector": {"matchLabels": {"team": "y"}},
                        "podSelector": {"matchLabels": {"app": "a"}},
                    }
                ]
            }
        ],
    )
    assert _cluster(both).allowed(C, B, 1)
    other = Pod("d", "ns2", {"app": "zzz"}, ip="10.2.0.4")
    assert not _cluster(both).allowed(other, B, 1)
    by_name = _policy(
        "by-name",
        ingress=[
            {
                "from": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ns2"}}}
                ]
            }
        ],
    )
    assert _cluster(by_name).allowed(other, B, 1)
    assert not _cluster(by_name).allowed(A, B, 1)


def test_ip_blocks_with_except_and_external_sources() -> None:
    block = _policy(
        "block",
        ingress=[{"from": [{"ipBlock": {"cidr": "10.2.0.0/16", "except": ["10.2.0.3/32"]}}]}],
    )
    cluster = _cluster(block)
    assert cluster.allowed(External("10.2.9.9"), A, 1)
    assert not cluster.allowed(External("10.3.0.1"), A, 1)
    assert not cluster.allowed(C, A, 1)  # excepted
    assert cluster.allowed(Pod("e", "ns2", {}, ip="10.2.0.5"), A, 1)  # pods match by IP
    assert cluster.allowed(External("10.2.9.9"), A, 53, "UDP")  # no ports: every protocol


def test_ports_numbers_ranges_names_and_protocols() -> None:
    ports = _policy(
        "ports",
        ingress=[
            {
                "ports": [
                    {"port": 80},
                    {"protocol": "UDP", "port": 53},
                    {"port": 1000, "endPort": 1002},
                    {"port": "http"},
                ]
            }
        ],
    )
    cluster = _cluster(ports)
    assert cluster.allowed(B, A, 80) and not cluster.allowed(B, A, 80, "UDP")
    assert cluster.allowed(B, A, 53, "UDP") and not cluster.allowed(B, A, 53)
    assert cluster.allowed(B, A, 1000) and cluster.allowed(B, A, 1002)
    assert not cluster.allowed(B, A, 999) and not cluster.allowed(B, A, 1003)
    assert cluster.allowed(B, A, 8080)  # the named port of A
    assert not cluster.allowed(A, B, 8080)  # B has no port named http
    all_tcp = _cluster(_policy("tcp", ingress=[{"ports": [{"protocol": "TCP"}]}]))
    assert all_tcp.allowed(B, A, 4242) and not all_tcp.allowed(B, A, 4242, "SCTP")


def test_egress_isolation_of_the_source_also_counts() -> None:
    egress = _policy(
        "egress",
        podSelector={"matchLabels": {"app": "b"}},
        egress=[{"to": [{"podSelector": {"matchLabels": {"app": "a"}}}], "ports": [{"port": 80}]}],
    )
    cluster = _cluster(egress)
    assert cluster.selecting(B, "Egress")
    # Without policyTypes, Ingress is always implied: B now accepts nothing.
    assert cluster.selecting(B, "Ingress") and not cluster.allowed(A, B, 80)
    assert cluster.allowed(B, A, 80)
    assert not cluster.allowed(B, A, 81)
    assert not cluster.allowed(B, C, 80)  # to: pods of ns1 only


def test_self_and_own_node_are_always_allowed() -> None:
    cluster = _cluster(DENY)
    assert cluster.allowed(A, A, 1)
    assert cluster.allowed(External("10.1.255.1", node="n1"), A, 1)
    assert not cluster.allowed(External("10.1.255.2", node="n2"), A, 1)


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {}, True),
        ({"matchLabels": {"app": "a"}}, {"app": "a", "x": "1"}, True),
        ({"matchLabels": {"app": "a"}}, {"app": "b"}, False),
        (
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]},
            {"app": "b"},
            True,
        ),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        (
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]},
            {"app": "a"},
            False,
        ),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"app": ""}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"app": "a"}, False),
    ],
)
def test_label_selectors(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert matches(selector, labels) is expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"ingres": [{}]}, "unknown fields"),
        ({"ingress": [{"form": []}]}, "unknown fields"),
        ({"ingress": [{"from": [{"podselector": {}}]}]}, "unknown fields"),
        ({"ingress": [{"from": [{}]}]}, "empty peer"),
        (
            {"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]},
            "ipBlock",
        ),
        ({"ingress": [{"ports": [{"port": "http", "endPort": 90}]}]}, "endPort"),
        ({"ingress": [{"ports": [{"port": 70000}]}]}, "out of range"),
        ({"ingress": [{"ports": [{"protocol": "ICMP"}]}]}, "protocol"),
        ({"policyTypes": ["Both"]}, "policyType"),
        ({"podSelector": {"matchLabel": {}}}, "unknown fields"),
    ],
)
def test_malformed_policies_are_refused(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        _cluster(_policy("bad", **spec))


def test_unknown_namespace_and_protocol_are_errors() -> None:
    with pytest.raises(KeyError):
        _cluster(DENY).allowed(B, Pod("z", "nowhere", {}), 1)
    with pytest.raises(PolicyError):
        _cluster(DENY).allowed(B, A, 1, "ICMP")
