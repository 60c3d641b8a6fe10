"""Every connection the system makes, in one table (STYLE 19): source -> destination:port,
why, and what admits it at each layer: the NetworkPolicy (rendered from
``assets/manifests/network-policies/``) and the security-group rules (the synthesized
templates, or the rules EKS itself creates).

The table is checked two ways (tests/test_flows.py): every flow is allowed by both layers (the
policy evaluator of tests/netpol.py, the security groups of the templates of several
configurations), and every allow of either layer serves a listed flow. ``docs/flows.md`` is
rendered from it (:func:`markdown`), and a test keeps it in step.

A feature that adds a connection adds a row here; the tests then name each policy rule or
security-group rule the row still lacks, or each rule that no row explains. Add a security
group to :data:`SECURITY_GROUPS` (its ``GroupDescription``) before a rule may name it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pd_constructs.network.network_policy import RAY_PORTS
from ray_pd_eks.config import AppConfig

HTTPS = 443
KUBELET = 10250
DNS = 53
ANY_IPV4 = "0.0.0.0/0"
# A peer standing for every CIDR of `endpointAllowedCidrs` (expanded per configuration).
ALLOWED_CIDRS = "endpointAllowedCidrs"
# A peer standing for the NAT gateway's Elastic IP as a /32 (known at deploy time only).
NAT_ADDRESS = "natGatewayElasticIp/32"

# Ways a connection is admitted other than by a NetworkPolicy rule.
NODE_LOCAL = "own node"  # the VPC CNI's policy agent admits the node's IP to every pod
NOT_POLICED = "—"  # the destination is not a pod of a namespace our policies isolate
NOT_IP = "not IP"  # EFA's SRD traffic bypasses the pod network, so no policy applies


@dataclass(frozen=True)
class SecurityGroup:
    """A security group by what it is attached to. ``description`` is a regular expression
    matched against the template's ``GroupDescription``; empty for the one EKS creates."""

    name: str
    attached_to: str
    description: str = ""


SECURITY_GROUPS = {
    g.name: g
    for g in (
        SecurityGroup(
            "cluster",
            "every node (so every pod: the VPC CNI gives pods their node's groups) and the "
            "control plane's interfaces; created by EKS",
        ),
        SecurityGroup(
            "control-plane",
            "the control plane's interfaces only (ResourcesVpcConfig.SecurityGroupIds)",
            r"EKS Control Plane Security Group",
        ),
        SecurityGroup(
            "efa", "the GPU nodes' EFA interfaces", r"EFA: all traffic to and from members"
        ),
        SecurityGroup("alb", "the application endpoint's ALB", r".* ALB of the model endpoint"),
        SecurityGroup(
            "kubectl", "aws-cdk-lib's kubectl provider function", r"kubectl provider: HTTPS out"
        ),
        SecurityGroup(
            "readiness-fn", "the readiness check's poller", r"Readiness check: HTTPS to the EKS"
        ),
        SecurityGroup(
            "recreate-fn", "the RayService recreate waiter", r"RayService recreate: HTTPS to"
        ),
        SecurityGroup(
            "ray-token-fn", "the Ray token writer", r"Ray token writer: HTTPS to the EKS"
        ),
        SecurityGroup(
            "probe-fn", "the deploy's endpoint probe", r"Endpoint probe: HTTPS out to the token"
        ),
    )
}


def security_group_named(description: str) -> str | None:
    """The :data:`SECURITY_GROUPS` name of a template's group, by its ``GroupDescription``."""
    for group in SECURITY_GROUPS.values():
        if group.description and re.match(group.description, description):
            return group.name
    return None


@dataclass(frozen=True)
class SgRule:
    """One security-group rule: on ``group``, ``direction`` "in" (from ``peer``) or "out" (to
    ``peer``); ``peer`` is a group name of :data:`SECURITY_GROUPS` or ``cidr:<block>`` (or
    ``cidr:endpointAllowedCidrs``); ports ``first``-``last``, ``None`` for all traffic.
    ``managed_by`` names who creates a rule that is not in our templates (EKS)."""

    group: str
    direction: str
    peer: str
    first: int | None = None
    last: int | None = None
    protocol: str = "tcp"
    managed_by: str = ""

    def __post_init__(self) -> None:
        if self.group not in SECURITY_GROUPS:
            raise ValueError(f"SgRule group {self.group!r} is not in SECURITY_GROUPS")
        if not self.peer.startswith("cidr:") and self.peer not in SECURITY_GROUPS:
            raise ValueError(f"SgRule peer {self.peer!r}: a group name or cidr:<block>")
        if self.direction not in ("in", "out"):
            raise ValueError(f"SgRule direction {self.direction!r}: in or out")

    @property
    def text(self) -> str:
        where = "from" if self.direction == "in" else "to"
        ports = "all" if self.first is None else _ports_text(self.first, self.last)
        proto = "" if self.protocol in ("tcp", "-1") else f"/{self.protocol}"
        peer = self.peer.removeprefix("cidr:")
        made = f" ({self.managed_by})" if self.managed_by else ""
        return f"`{self.group}` {self.direction} {where} `{peer}` {ports}{proto}{made}"


def _ports_text(first: int, last: int | None) -> str:
    return str(first) if last in (None, first) else f"{first}-{last}"


def _rule(direction: str, group: str, peer: str, first: int | None, last: int | None) -> SgRule:
    if first is None:
        return SgRule(group, direction, peer, protocol="-1")
    return SgRule(group, direction, peer, first, first if last is None else last)


def _in(group: str, peer: str, first: int | None = None, last: int | None = None) -> SgRule:
    return _rule("in", group, peer, first, last)


def _out(group: str, peer: str, first: int | None = None, last: int | None = None) -> SgRule:
    return _rule("out", group, peer, first, last)


# EKS creates these on the cluster security group (Amazon EKS User Guide, "View Amazon EKS
# security group requirements for clusters": inbound all from itself, outbound all).
CLUSTER_SELF = SgRule("cluster", "in", "cluster", protocol="-1", managed_by="EKS")
CLUSTER_OUT = SgRule("cluster", "out", f"cidr:{ANY_IPV4}", protocol="-1", managed_by="EKS")
# aws-cdk-lib's ControlPlaneSecurityGroup keeps its default allow-all-outbound rule.
CONTROL_PLANE_OUT = SgRule("control-plane", "out", f"cidr:{ANY_IPV4}", protocol="-1")

# When a flow exists, by name (rendered into the doc).
CONDITIONS: dict[str, Callable[[AppConfig], bool]] = {
    "always": lambda c: True,
    "prefill/decode": lambda c: c.is_pd,
    "kvBackend=UCX": lambda c: c.is_pd and not c.uses_efa_transport,
    "endpointExposure set": lambda c: c.endpoint_exposed,
    "endpointAuth=jwt": lambda c: c.endpoint_exposed and c.endpoint_auth == "jwt",
    "observability=cloudwatch": lambda c: c.observability_enabled,
    "decode autoscaling": lambda c: c.decode_autoscales,
    # pd_constructs/readiness/endpoint_probe.py: skipped with an existing identity provider.
    "endpoint probe": lambda c: (
        c.endpoint_exposed and (c.endpoint_auth == "none" or c.endpoint_uses_cognito)
    ),
    "endpoint probe, internal ALB": lambda c: (
        c.endpoint_exposure == "internal" and (c.endpoint_auth == "none" or c.endpoint_uses_cognito)
    ),
    "endpoint probe, internet-facing ALB": lambda c: (
        c.endpoint_exposure == "internet-facing"
        and (c.endpoint_auth == "none" or c.endpoint_uses_cognito)
    ),
}


@dataclass(frozen=True)
class Flow:
    """One connection. ``source``/``destination`` are keys of :data:`ENDPOINTS`; ports
    ``first``-``last`` (``None``: all traffic); ``network_policy`` is the NetworkPolicy's
    ``metadata.name`` that admits it, or :data:`NODE_LOCAL`, :data:`NOT_POLICED`,
    :data:`NOT_IP`; ``security_groups`` the rules that admit it (both halves: the source's
    egress and the destination's ingress; none when it never leaves the node)."""

    id: str
    source: str
    destination: str
    first: int | None
    last: int | None
    purpose: str
    network_policy: str
    security_groups: tuple[SgRule, ...]
    protocol: str = "TCP"
    when: str = "always"

    def __post_init__(self) -> None:
        for key in (self.source, self.destination):
            if key not in ENDPOINTS:
                raise ValueError(f"flow {self.id}: endpoint {key!r} is not in ENDPOINTS")
        if self.when not in CONDITIONS:
            raise ValueError(f"flow {self.id}: condition {self.when!r} is not in CONDITIONS")

    def applies(self, config: AppConfig) -> bool:
        return CONDITIONS[self.when](config)

    @property
    def ports_text(self) -> str:
        if self.first is None:
            return "all"
        return _ports_text(self.first, self.last)


# Who and what connects. Pods are named by the labels and namespaces the policies select.
ENDPOINTS = {
    "ray-pods": "every Ray pod of the RayService (head and GPU workers)",
    "ray-head": "the Ray head pod (CPU, on a system node)",
    "gpu-workers": "the Ray GPU worker pods (prefill and decode)",
    "gpu-nodes": "the GPU nodes' EFA devices (SRD, beside the pod network)",
    "kuberay-operator": "the KubeRay operator pod (namespace kuberay-system)",
    "bench": "the benchmark Job's load generator pods (ray_pd_eks/bench/job.py)",
    "api-server": "the EKS control plane's interfaces (their own /28 subnets)",
    "alb": "the application endpoint's ALB (its subnets' addresses: two /27 subnets of its own "
    "when internal, the public subnets when internet-facing; no node is in either)",
    "clients": "callers of the endpoint (endpointAllowedCidrs)",
    "jwt-issuer": "the token issuer's JWKS endpoint (Cognito's regional endpoint or yours)",
    "cloudwatch-agent": "the CloudWatch agent DaemonSet pod on the same node (host network)",
    "kubelet": "the node's kubelet (probes)",
    "nodes": "every node and the pods on the pod network (system pods, add-ons, Ray)",
    "internet": "the internet through the NAT gateway (ECR, Hugging Face, S3, AWS APIs)",
    "kubectl-fn": "aws-cdk-lib's kubectl provider function (private subnets)",
    "readiness-fn": "the readiness check's poller function (private subnets)",
    "recreate-fn": "the RayService recreate waiter function (private subnets)",
    "ray-token-fn": "the Ray token writer function (private subnets)",
    "probe-fn": "the deploy's endpoint probe function (private subnets; no Kubernetes identity)",
}

_P = RAY_PORTS
_RAY = (CLUSTER_SELF,)  # pod to pod: both on nodes carrying the cluster security group
_API = (CLUSTER_SELF, CONTROL_PLANE_OUT)  # control plane to a pod on a node


def _fn_to_api(fn: str, group: str) -> Flow:
    return Flow(
        f"{fn}-api",
        fn,
        "api-server",
        HTTPS,
        HTTPS,
        "Kubernetes API calls (the EKS token is presigned locally)",
        NOT_POLICED,
        (_out(group, "control-plane", HTTPS), _in("control-plane", group, HTTPS)),
    )


FLOWS: tuple[Flow, ...] = (
    # -- inside the Ray cluster ---------------------------------------------------------------
    Flow(
        "gcs",
        "ray-pods",
        "ray-head",
        _P.gcs,
        _P.gcs,
        "GCS: node registration, wait-gcs-ready, core workers",
        "ray-gcs-from-cluster",
        _RAY,
    ),
    *(
        Flow(
            f"ray-{name}",
            "ray-pods",
            "ray-pods",
            first,
            last,
            purpose,
            "ray-cluster-internal",
            _RAY,
        )
        for name, first, last, purpose in (
            ("node-manager", _P.node_manager, _P.node_manager, "raylet"),
            ("object-manager", _P.object_manager, _P.object_manager, "object transfers"),
            (
                "runtime-env-agent",
                _P.runtime_env_agent,
                _P.runtime_env_agent,
                "runtime-env agent",
            ),
            (
                "dashboard-agent-grpc",
                _P.dashboard_agent_grpc,
                _P.dashboard_agent_grpc,
                "dashboard agent gRPC (also the metrics agent)",
            ),
            (
                "dashboard-agent-http",
                _P.dashboard_agent_http,
                _P.dashboard_agent_http,
                "dashboard agent HTTP (the head's dashboard calls it)",
            ),
            (
                "core-workers",
                _P.min_worker,
                _P.max_worker,
                "core-worker gRPC servers (actor calls: Serve controller, replicas, proxies)",
            ),
        )
    ),
    Flow(
        "nixl-side-channel",
        "gpu-workers",
        "gpu-workers",
        _P.nixl_side_channel,
        _P.nixl_side_channel + _P.nixl_side_channel_count - 1,
        "vLLM NIXL handshake (side channel, one port per data-parallel rank)",
        "ray-kv-transfer",
        _RAY,
        when="prefill/decode",
    ),
    Flow(
        "ucx-tcp",
        "gpu-workers",
        "gpu-workers",
        _P.ucx_tcp_first,
        _P.ucx_tcp_last,
        "KV cache over UCX's TCP transport",
        "ray-kv-transfer",
        _RAY,
        when="kvBackend=UCX",
    ),
    Flow(
        "efa-srd",
        "gpu-nodes",
        "gpu-nodes",
        None,
        None,
        "KV cache over EFA (SRD; libfabric's efa provider), all traffic as EFA requires",
        NOT_IP,
        (_in("efa", "efa"), _out("efa", "efa")),
        protocol="all",
    ),
    # -- into the Ray cluster -----------------------------------------------------------------
    *(
        Flow(
            f"operator-{name}",
            "kuberay-operator",
            "ray-head",
            port,
            port,
            purpose,
            "ray-from-kuberay-operator",
            _RAY,
        )
        for name, port, purpose in (
            ("dashboard", _P.dashboard, "Serve status and config submission (Ray token)"),
            ("serve", _P.serve, "the head's Serve proxy health check (/-/healthz)"),
        )
    ),
    Flow(
        "api-serve",
        "api-server",
        "ray-pods",
        _P.serve,
        _P.serve,
        "service proxy to Serve: readiness check, `ray-pd-eks smoke`",
        "ray-serve-from-api-server",
        _API,
    ),
    Flow(
        "api-dashboard",
        "api-server",
        "ray-head",
        _P.dashboard,
        _P.dashboard,
        "service proxy to the dashboard: readiness, `status`, `efa-check` (Ray token)",
        "ray-dashboard-from-api-server",
        _API,
    ),
    Flow(
        "api-metrics",
        "api-server",
        "gpu-workers",
        _P.metrics_export,
        _P.metrics_export,
        "pod proxy to the engines' metrics: the readiness check's and the KV probe's NIXL counters",
        "ray-metrics-from-api-server",
        _API,
        when="prefill/decode",
    ),
    Flow(
        "bench-serve",
        "bench",
        "ray-pods",
        _P.serve,
        _P.serve,
        "benchmark load to the Serve proxies",
        "ray-serve-from-bench",
        _RAY,
    ),
    Flow(
        "alb-serve",
        "alb",
        "ray-pods",
        _P.serve,
        _P.serve,
        "the endpoint's target group (pod IPs) and its health check; the policy admits the "
        "ALB's subnets only, so no pod on a node reaches Serve past the JWT check",
        "ray-serve-from-load-balancer",
        (_out("alb", "cluster", _P.serve), _in("cluster", "alb", _P.serve)),
        when="endpointExposure set",
    ),
    Flow(
        "scrape-metrics",
        "cloudwatch-agent",
        "ray-pods",
        _P.metrics_export,
        _P.metrics_export,
        "PodMonitor scrapes: the agent on each node scrapes the targets on its own node",
        NODE_LOCAL,
        (),
        when="observability=cloudwatch",
    ),
    Flow(
        "kubelet-probes",
        "kubelet",
        "ray-pods",
        None,
        None,
        "kubelet probes (the dashboard agent's HTTP port, Serve's health)",
        NODE_LOCAL,
        (),
        protocol="all",
    ),
    # -- the endpoint ---------------------------------------------------------------------------
    Flow(
        "clients-alb",
        "clients",
        "alb",
        HTTPS,
        HTTPS,
        "HTTPS to the listener (JWT checked before forwarding)",
        NOT_POLICED,
        (_in("alb", f"cidr:{ALLOWED_CIDRS}", HTTPS),),
        when="endpointExposure set",
    ),
    Flow(
        "alb-jwks",
        "alb",
        "jwt-issuer",
        HTTPS,
        HTTPS,
        "jwt-validation fetches the issuer's signing keys (JWKS): through the NAT gateway "
        "(the internal ALB's subnets route to it) or the internet gateway (internet-facing)",
        NOT_POLICED,
        (_out("alb", f"cidr:{ANY_IPV4}", HTTPS),),
        when="endpointAuth=jwt",
    ),
    # -- the control plane and the nodes --------------------------------------------------------
    Flow(
        "nodes-api",
        "nodes",
        "api-server",
        HTTPS,
        HTTPS,
        "kubelet, add-ons, the operators, the head's autoscaler to the Kubernetes API",
        NOT_POLICED,
        (CLUSTER_SELF, CLUSTER_OUT),
    ),
    Flow(
        "api-kubelet",
        "api-server",
        "nodes",
        KUBELET,
        KUBELET,
        "logs, exec, port-forward through the kubelet; admission webhooks of the add-ons",
        NOT_POLICED,
        _API,
    ),
    Flow(
        "dns",
        "nodes",
        "nodes",
        DNS,
        DNS,
        "CoreDNS (UDP and TCP)",
        NOT_POLICED,
        (CLUSTER_SELF,),
        protocol="TCP/UDP",
    ),
    Flow(
        "egress",
        "nodes",
        "internet",
        None,
        None,
        "images (ECR; S3 by the gateway endpoint), Hugging Face, AWS APIs, Pod Identity",
        NOT_POLICED,
        (CLUSTER_OUT,),
        protocol="all",
    ),
    # -- the functions ----------------------------------------------------------------------
    Flow(
        "kubectl-api",
        "kubectl-fn",
        "api-server",
        HTTPS,
        HTTPS,
        "kubectl/helm against the Kubernetes API",
        NOT_POLICED,
        (_out("kubectl", f"cidr:{ANY_IPV4}", HTTPS), _in("control-plane", "kubectl", HTTPS)),
    ),
    Flow(
        "kubectl-internet",
        "kubectl-fn",
        "internet",
        HTTPS,
        HTTPS,
        "EKS API (update-kubeconfig), Helm chart repositories, S3 (assets)",
        NOT_POLICED,
        (_out("kubectl", f"cidr:{ANY_IPV4}", HTTPS),),
    ),
    _fn_to_api("readiness-fn", "readiness-fn"),
    _fn_to_api("recreate-fn", "recreate-fn"),
    _fn_to_api("ray-token-fn", "ray-token-fn"),
    Flow(
        "probe-internet",
        "probe-fn",
        "internet",
        HTTPS,
        HTTPS,
        "the stack's Cognito token endpoint and DescribeUserPoolClient, DescribeStacks "
        "(rollback check): none has a managed prefix list, so any IPv4 address on 443",
        NOT_POLICED,
        (_out("probe-fn", f"cidr:{ANY_IPV4}", HTTPS),),
        when="endpoint probe",
    ),
    Flow(
        "probe-alb",
        "probe-fn",
        "alb",
        HTTPS,
        HTTPS,
        "the deploy's one chat completion through the internal ALB (docs/readiness.md)",
        NOT_POLICED,
        (_out("probe-fn", f"cidr:{ANY_IPV4}", HTTPS), _in("alb", "probe-fn", HTTPS)),
        when="endpoint probe, internal ALB",
    ),
    Flow(
        "probe-nat-alb",
        "probe-fn",
        "alb",
        HTTPS,
        HTTPS,
        "the deploy's one chat completion through the internet-facing ALB: it leaves through "
        "the NAT gateway, so the ALB admits the NAT's Elastic IP, and with it anything else "
        "that leaves through the NAT gateway (the listener still checks the token)",
        NOT_POLICED,
        (_out("probe-fn", f"cidr:{ANY_IPV4}", HTTPS), _in("alb", f"cidr:{NAT_ADDRESS}", HTTPS)),
        when="endpoint probe, internet-facing ALB",
    ),
)


def _check_table() -> None:
    ids = [f.id for f in FLOWS]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise ValueError(f"flow ids appear twice: {sorted(duplicates)}")


_check_table()


def flows_for(config: AppConfig) -> list[Flow]:
    """The flows of one configuration."""
    return [f for f in FLOWS if f.applies(config)]


def template_rules(config: AppConfig) -> set[SgRule]:
    """The security-group rules our templates must hold for ``config``: every flow's rules
    that EKS does not create, with ``endpointAllowedCidrs`` expanded."""
    found: set[SgRule] = set()
    for flow in flows_for(config):
        for rule in flow.security_groups:
            if rule.managed_by:
                continue
            if rule.peer == f"cidr:{ALLOWED_CIDRS}":
                for cidr in config.endpoint_allowed_cidrs:
                    found.add(
                        SgRule(rule.group, rule.direction, f"cidr:{cidr}", rule.first, rule.last)
                    )
            else:
                found.add(rule)
    return found


def markdown() -> str:
    """docs/flows.md, rendered from the table."""
    lines = [
        "# Every connection",
        "",
        "<!-- Rendered from pd_constructs/inventory/flows.py by "
        "`python -m pd_constructs.inventory.flows`; "
        "tests/test_flows.py fails when this file and the table differ. -->",
        "",
        "One row per connection the system makes: who connects to what, why, and what admits "
        "it at each layer. The table lives in [`pd_constructs/inventory/flows.py`]"
        "(../pd_constructs/inventory/flows.py); `tests/test_flows.py` checks it two ways "
        "against the synthesized "
        "NetworkPolicies (with the evaluator in `tests/netpol.py`) and security groups (the "
        "templates of several configurations): every flow is admitted by both layers, and "
        "every policy rule and every security-group rule serves a listed flow.",
        "",
        f"NetworkPolicy column: the policy's name, or *{NODE_LOCAL}* (the VPC CNI's "
        "network-policy agent admits the node's own IP to every pod: Kubernetes documents "
        "that a pod's resident node can always reach it, and aws-network-policy-agent adds "
        "the node IP to every pod's allow map), *not IP* (EFA's SRD traffic bypasses the "
        f"pod network), or {NOT_POLICED} (the destination is no pod of a namespace our "
        "policies isolate). Only the Ray and warm-up namespaces are isolated (ingress only); "
        "egress is not restricted by policy.",
        "",
        "| id | from | to | port | purpose | NetworkPolicy | security-group rules | when |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in FLOWS:
        rules = "<br>".join(r.text for r in f.security_groups) or "none: never leaves the node"
        ports = f.ports_text if f.protocol in ("TCP", "all") else f"{f.ports_text} ({f.protocol})"
        policy = (
            f.network_policy
            if f.network_policy in (NODE_LOCAL, NOT_POLICED, NOT_IP)
            else f"`{f.network_policy}`"
        )
        lines.append(
            f"| {f.id} | {f.source} | {f.destination} | {ports} | {f.purpose} | {policy} "
            f"| {rules} | {f.when} |"
        )
    lines += ["", "## Endpoints", "", "| name | what |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in ENDPOINTS.items()]
    lines += ["", "## Security groups", "", "| name | attached to |", "|---|---|"]
    lines += [f"| {g.name} | {g.attached_to} |" for g in SECURITY_GROUPS.values()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
