"""A test-side evaluator of Kubernetes NetworkPolicy (networking.k8s.io/v1) semantics.

``allowed(policies, source, destination, port)`` answers "may ``source`` open a TCP/UDP/SCTP
connection to ``destination`` on ``port``?" the way the API documents it:

- A pod is isolated for ingress (egress) when at least one policy in its namespace selects it
  (``spec.podSelector``) and lists ``Ingress`` (``Egress``) in ``policyTypes`` (when
  ``policyTypes`` is absent: ``Ingress``, plus ``Egress`` if the policy has ``egress`` rules).
  An isolated pod accepts a connection only if some rule of some selecting policy allows it;
  policies add up, there is no deny rule.
- A connection needs both: the source's egress allows it AND the destination's ingress allows
  it (a source outside the cluster has no egress policies).
- A rule with no ``from``/``to`` matches every peer; with no ``ports`` every port. A peer with
  ``podSelector`` alone means pods of the policy's namespace; ``namespaceSelector`` alone, every
  pod of matching namespaces; both, matching pods in matching namespaces; ``ipBlock``, source
  addresses in ``cidr`` and outside every ``except``. Here ``ipBlock`` matches pods too, by pod
  IP, as the VPC CNI's eBPF agent does (the API leaves it to the implementation).
- Ports: a number, or a name resolved against the destination's container ports; ``endPort``
  makes a range; ``protocol`` defaults to TCP.
- A pod may always reach itself, and a pod accepts anything from its own node (kubelet probes;
  "pods cannot block access from their resident node", and the VPC CNI's agent allows the
  node IP).

Selectors support ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists, DoesNotExist);
an empty selector matches everything. Unknown fields raise, so a typo in a policy fails a test
instead of silently matching nothing. Pods are built from rendered manifests with
:func:`pods_from_template` (pod templates of RayServices and DaemonSets).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PROTOCOLS = ("TCP", "UDP", "SCTP")
_POLICY_SPEC_KEYS = {"podSelector", "policyTypes", "ingress", "egress"}
_RULE_KEYS = {"from", "to", "ports"}
_PEER_KEYS = {"podSelector", "namespaceSelector", "ipBlock"}
_PORT_KEYS = {"port", "endPort", "protocol"}
_SELECTOR_KEYS = {"matchLabels", "matchExpressions"}
# Per policy type: the spec's list of rules, and each rule's list of peers.
_DIRECTION_KEYS = {"Ingress": ("ingress", "from"), "Egress": ("egress", "to")}


class PolicyError(ValueError):
    """A policy that the API server would reject or that this evaluator cannot read."""


@dataclass(frozen=True)
class Pod:
    """A pod as the policies see it. ``ports`` maps container port names to numbers."""

    name: str
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ip: str | None = None
    node: str | None = None
    ports: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class External:
    """A source outside the pod network: an address (the API server's interfaces, a load
    balancer) or, with ``node``, a node itself (kubelet, host-network pods)."""

    ip: str
    node: str | None = None


Source = Pod | External


@dataclass
class Cluster:
    """Namespaces (name -> labels; ``kubernetes.io/metadata.name`` is added as the API server
    does) and the NetworkPolicies in force."""

    namespaces: Mapping[str, Mapping[str, str]]
    policies: Sequence[Mapping[str, Any]]

    def __post_init__(self) -> None:
        for policy in self.policies:
            _check_policy(policy)
        self._ns_labels = {
            name: {**labels, "kubernetes.io/metadata.name": name}
            for name, labels in self.namespaces.items()
        }

    def namespace_labels(self, name: str) -> dict[str, str]:
        if name not in self._ns_labels:
            raise KeyError(f"namespace {name!r} is not in this cluster: {sorted(self._ns_labels)}")
        return self._ns_labels[name]

    def selecting(self, pod: Pod, direction: str) -> list[Mapping[str, Any]]:
        """Policies that isolate ``pod`` for ``direction`` ("Ingress" or "Egress")."""
        self.namespace_labels(pod.namespace)
        found = []
        for policy in self.policies:
            if policy["metadata"].get("namespace") != pod.namespace:
                continue
            spec = policy["spec"]
            if direction in _policy_types(spec) and matches(spec["podSelector"], pod.labels):
                found.append(policy)
        return found

    def allowed(self, source: Source, destination: Pod, port: int, protocol: str = "TCP") -> bool:
        """Whether ``source`` may connect to ``destination`` on ``port``/``protocol``."""
        if protocol not in PROTOCOLS:
            raise PolicyError(f"protocol {protocol!r} is not one of {PROTOCOLS}")
        if source == destination:
            return True
        if isinstance(source, External) and source.node and source.node == destination.node:
            return True
        if isinstance(source, Pod) and not self._direction_allows(
            "Egress", source, destination, destination, port, protocol
        ):
            return False
        return self._direction_allows("Ingress", destination, source, destination, port, protocol)

    def _direction_allows(
        self, direction: str, isolated: Pod, peer: Source, dst: Pod, port: int, protocol: str
    ) -> bool:
        """Whether the ``direction`` policies that isolate ``isolated`` let ``peer`` reach
        ``dst``; a pod no such policy selects is not isolated that way."""
        rules_key, peers_key = _DIRECTION_KEYS[direction]
        policies = self.selecting(isolated, direction)
        if not policies:
            return True
        return any(
            self._rule_matches(rule, peers_key, policy, peer, dst, port, protocol)
            for policy in policies
            for rule in policy["spec"].get(rules_key) or []
        )

    def _rule_matches(
        self,
        rule: Mapping[str, Any],
        peers_key: str,
        policy: Mapping[str, Any],
        peer: Source,
        dst: Pod,
        port: int,
        protocol: str,
    ) -> bool:
        ports = rule.get("ports")
        if ports and not any(_port_matches(p, dst, port, protocol) for p in ports):
            return False
        peers = rule.get(peers_key)
        if not peers:
            return True
        namespace = policy["metadata"]["namespace"]
        return any(self._peer_matches(p, namespace, peer) for p in peers)

    def _peer_matches(self, peer: Mapping[str, Any], policy_ns: str, source: Source) -> bool:
        if "ipBlock" in peer:
            return source.ip is not None and _in_block(peer["ipBlock"], source.ip)
        if not isinstance(source, Pod):
            return False
        if "namespaceSelector" in peer:
            labels = self.namespace_labels(source.namespace)
            if not matches(peer["namespaceSelector"], labels):
                return False
        elif source.namespace != policy_ns:
            return False
        return "podSelector" not in peer or matches(peer["podSelector"], source.labels)


def allowed(
    cluster: Cluster, source: Source, destination: Pod, port: int, protocol: str = "TCP"
) -> bool:
    """Function form of :meth:`Cluster.allowed`."""
    return cluster.allowed(source, destination, port, protocol)


# -- selectors, ports, blocks -----------------------------------------------------------------


def matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A LabelSelector against a label set (an empty selector matches everything)."""
    unknown = set(selector) - _SELECTOR_KEYS
    if unknown:
        raise PolicyError(f"label selector has unknown fields {sorted(unknown)}")
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != str(value):
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            raise PolicyError(f"matchExpressions operator {op!r} is not a label-selector operator")
        if not ok:
            return False
    return True


def _port_matches(entry: Mapping[str, Any], dst: Pod, port: int, protocol: str) -> bool:
    if entry.get("protocol", "TCP") != protocol:
        return False
    if "port" not in entry:
        return True  # every port of that protocol
    value = entry["port"]
    if isinstance(value, str):
        if value not in dst.ports:
            return False  # a named port the destination does not have matches nothing
        first = dst.ports[value]
    else:
        first = int(value)
    last = int(entry.get("endPort", first))
    return first <= port <= last


def _in_block(block: Mapping[str, Any], ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    if address not in ipaddress.ip_network(block["cidr"], strict=True):
        return False
    return not any(address in ipaddress.ip_network(e, strict=True) for e in block.get("except", []))


def _policy_types(spec: Mapping[str, Any]) -> list[str]:
    if "policyTypes" in spec:
        return list(spec["policyTypes"])
    return ["Ingress", *(["Egress"] if "egress" in spec else [])]


# -- validation (what the API server's schema and validation would refuse) ---------------------


def _check_policy(policy: Mapping[str, Any]) -> None:
    if policy.get("apiVersion") != "networking.k8s.io/v1" or policy.get("kind") != "NetworkPolicy":
        raise PolicyError(f"not a networking.k8s.io/v1 NetworkPolicy: {policy.get('kind')!r}")
    meta = policy.get("metadata") or {}
    if not meta.get("name") or not meta.get("namespace"):
        raise PolicyError(f"NetworkPolicy without metadata.name/namespace: {meta}")
    spec = policy.get("spec")
    if not isinstance(spec, Mapping) or "podSelector" not in spec:
        raise PolicyError(f"NetworkPolicy {meta['name']}: spec.podSelector is required")
    _check_keys(spec, _POLICY_SPEC_KEYS, f"NetworkPolicy {meta['name']} spec")
    for kind in spec.get("policyTypes", []):
        if kind not in ("Ingress", "Egress"):
            raise PolicyError(f"NetworkPolicy {meta['name']}: policyType {kind!r}")
    matches(spec["podSelector"], {})
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        for rule in spec.get(direction) or []:
            where = f"NetworkPolicy {meta['name']} {direction} rule"
            _check_keys(rule, _RULE_KEYS, where)
            for peer in rule.get(peers_key) or []:
                _check_peer(peer, where)
            for entry in rule.get("ports") or []:
                _check_port(entry, where)


def _check_keys(node: Mapping[str, Any], allowed_keys: set[str], where: str) -> None:
    unknown = set(node) - allowed_keys
    if unknown:
        raise PolicyError(f"{where}: unknown fields {sorted(unknown)}")


def _check_peer(peer: Mapping[str, Any], where: str) -> None:
    _check_keys(peer, _PEER_KEYS, f"{where} peer")
    if not peer:
        raise PolicyError(f"{where}: an empty peer")
    if "ipBlock" in peer:
        if len(peer) > 1:
            raise PolicyError(f"{where}: ipBlock cannot be combined with a selector")
        block = peer["ipBlock"]
        ipaddress.ip_network(block["cidr"], strict=True)
        for excepted in block.get("except", []):
            ipaddress.ip_network(excepted, strict=True)
    for key in ("podSelector", "namespaceSelector"):
        if key in peer:
            matches(peer[key], {})


def _check_port(entry: Mapping[str, Any], where: str) -> None:
    _check_keys(entry, _PORT_KEYS, f"{where} port")
    if entry.get("protocol", "TCP") not in PROTOCOLS:
        raise PolicyError(f"{where}: protocol {entry['protocol']!r}")
    value = entry.get("port")
    if "endPort" in entry and (
        not isinstance(value, int) or not value <= int(entry["endPort"]) <= 65535
    ):
        raise PolicyError(f"{where}: endPort needs a numeric port <= endPort <= 65535")
    if isinstance(value, int) and not 1 <= value <= 65535:
        raise PolicyError(f"{where}: port {value} is out of range")


# -- pods from rendered manifests -------------------------------------------------------------


def pods_from_template(
    template: Mapping[str, Any],
    *,
    namespace: str,
    name: str,
    ip: str | None = None,
    node: str | None = None,
) -> Pod:
    """A pod created from a pod template (its labels and named container ports)."""
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    ports: dict[str, int] = {}
    for container in template["spec"].get("containers", []):
        for entry in container.get("ports") or []:
            if "name" in entry:
                ports[entry["name"]] = int(entry["containerPort"])
    return Pod(name=name, namespace=namespace, labels=labels, ip=ip, node=node, ports=ports)


def policies_in(documents: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The NetworkPolicies among rendered objects."""
    return [d for d in documents if d.get("kind") == "NetworkPolicy"]
