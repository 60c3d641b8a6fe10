"""Every identity the system creates, and what it may do, in one table (STYLE 19): IAM roles
(with their Pod Identity associations and EKS access entries) and Kubernetes RBAC subjects.

Checked two ways against the synthesized templates and manifests (tests/test_identities.py,
with tests/identity_facts.py reading the templates): every role of every stack matches exactly
one row, every row matches a role, and the actions, managed policies, trusted principals,
service accounts, Kubernetes groups and access policies of the row are exactly those of its
roles; every RBAC subject bound in our manifests is a row whose rules are exactly the bound
ones. The service accounts that charts create and our admission policies name (the KubeRay
operator) are rows too, derived from the chart's release (tests/test_operator_identity.py).
``docs/identities.md`` is rendered from it (``python -m pd_constructs.inventory.identities``).

What the table does not hold (and says so in the doc): the resources each action is scoped to
(the tests of each construct pin those), and RBAC that Helm charts or operators create at
deploy time (the KubeRay operator, the AWS Load Balancer Controller, the Cluster Autoscaler, the
CloudWatch add-on, KubeRay's autoscaler Role for the head).

Adding or changing an identity is one edit of a row; the test names the role path, action,
policy or rule that is missing or extra.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aws_cdk import aws_iam as iam

from pd_constructs.cluster.vpc_cni import cni_statements
from pd_constructs.common.helm import kuberay_operator_identity
from pd_constructs.endpoint.endpoint import controller_policy_statements
from pd_constructs.observability.observability import agent_statements
from ray_pd_eks.config import AppConfig

LAMBDA = "Service:lambda.amazonaws.com"
PODS = "Service:pods.eks.amazonaws.com"
EC2 = "Service:ec2.amazonaws.com"
STATES = "Service:states.amazonaws.com"
BASIC = "AWSLambdaBasicExecutionRole"
VPC_ACCESS = "AWSLambdaVPCAccessExecutionRole"
DESCRIBE_OWN_STACK = "cloudformation:DescribeStacks"

# Rows no configuration of the tests' session synthesizes (with why); everything else is
# checked two ways on every test run.
NOT_SYNTHESIZED_IN_TESTS = {
    "access-log-auto-delete": "needs endpointExposure, region and retainLogs=false at once; "
    "the session's configurations each lack one (adding one costs a whole synth)",
    "endpoint-probe-no-auth": "needs endpointExposure=internal with endpointAuth=none; the "
    "session's endpoints use jwt (the same function with Cognito is row endpoint-probe)",
}

CONDITIONS: dict[str, Callable[[AppConfig], bool]] = {
    "always": lambda c: True,
    "servingMode=pd": lambda c: c.is_pd,
    "observability=cloudwatch": lambda c: c.observability_enabled,
    "endpointExposure set": lambda c: c.endpoint_exposed,
    "GPU autoscaling": lambda c: c.gpu_nodes_autoscale,
    "modelS3Uri set": lambda c: bool(c.model_s3_uri),
    "hfTokenSecretArn set": lambda c: bool(c.hf_token_secret_arn),
    # pd_constructs/readiness/endpoint_probe.py (skipped with an existing identity provider).
    "endpoint probe, Cognito": lambda c: c.endpoint_uses_cognito,
    "endpoint probe, endpointAuth=none": lambda c: c.endpoint_exposed and c.endpoint_auth == "none",
    "retainLogs=true": lambda c: c.retain_logs,
    "access logs deleted with the stack": lambda c: (
        c.endpoint_exposed and bool(c.region) and not c.retain_logs
    ),
}


@dataclass(frozen=True)
class Role:
    """One kind of IAM role. ``paths`` are ``fnmatch`` patterns of
    ``<stack>/<construct path>`` (or ``<stack>/<logical id>`` for roles aws-cdk-lib makes
    outside the construct tree); every other field is the exact set its roles hold."""

    id: str
    paths: tuple[str, ...]
    purpose: str
    principals: tuple[str, ...]
    actions: tuple[str, ...] = ()
    managed: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()  # "<ns>/<name>" or "addon <addon>/<name>"
    kubernetes_groups: tuple[str, ...] = ()
    access_policies: tuple[str, ...] = ()
    when: str = "always"

    def __post_init__(self) -> None:
        if self.when not in CONDITIONS:
            raise ValueError(f"identity {self.id}: condition {self.when!r} is not in CONDITIONS")

    def applies(self, config: AppConfig) -> bool:
        return CONDITIONS[self.when](config)

    def formatted(self, values: tuple[str, ...], config: AppConfig) -> set[str]:
        return {v.format(ns=config.namespace, rs=config.ray_service_name) for v in values}


@dataclass(frozen=True)
class RbacSubject:
    """A Kubernetes subject bound in our manifests and its exact rules, as
    ``<namespace or *>: <verbs> <group/>resource[names]``; ``{ns}`` and ``{rs}`` stand for
    ``namespace`` and ``rayServiceName``."""

    id: str
    subject: str
    purpose: str
    rules: tuple[str, ...]
    when: str = "always"
    # Rules held only under a condition of CONDITIONS: (condition, rule).
    rules_when: tuple[tuple[str, str], ...] = ()

    def applies(self, config: AppConfig) -> bool:
        return CONDITIONS[self.when](config)

    def formatted_rules(self, config: AppConfig) -> set[str]:
        held = [*self.rules, *(r for when, r in self.rules_when if CONDITIONS[when](config))]
        return {r.format(ns=config.namespace, rs=config.ray_service_name) for r in held}

    @property
    def rules_text(self) -> tuple[str, ...]:
        return (*self.rules, *(f"{r} ({when})" for when, r in self.rules_when))


@dataclass(frozen=True)
class ChartAccount:
    """A service account a Helm chart creates (so not bound in our manifests) that our own
    manifests name: ``subject`` is its user name, ``named_by`` the admission policies (by
    ``metadata.name``) that tell it apart from every other user."""

    id: str
    subject: str
    purpose: str
    named_by: tuple[str, ...]


def _policy_actions(statements: list[iam.PolicyStatement]) -> tuple[str, ...]:
    """The actions of a construct's own statements (read from there, not repeated here)."""
    return tuple(sorted({action for statement in statements for action in statement.actions}))


_FRAMEWORK = (
    "*/Provider/framework-onEvent/ServiceRole/Resource",
    "*/Provider/framework-isComplete/ServiceRole/Resource",
    "*/Provider/framework-onTimeout/ServiceRole/Resource",
)

ROLES: tuple[Role, ...] = (
    Role(
        "eks-cluster",
        ("Cluster/Cluster/Resource/Role/Resource",),
        "the EKS control plane's service role",
        ("Service:eks.amazonaws.com",),
        managed=("AmazonEKSClusterPolicy",),
    ),
    Role(
        "nodes",
        ("Workload/SystemNodes/NodeRole/Resource", "GpuNodes/GpuNodes/NodeRole/Resource"),
        "system and GPU nodes: join the cluster, pull images (the CNI's rights are aws-node's)",
        (EC2,),
        managed=("AmazonEC2ContainerRegistryPullOnly", "AmazonEKSWorkerNodePolicy"),
    ),
    Role(
        "vpc-cni",
        ("Cluster/VpcCni/Role/Resource",),
        "aws-node (VPC CNI) through Pod Identity: network interfaces and addresses of this VPC, "
        "created only in the node subnets (the system nodes' by ARN, the GPU subnet of the GPU "
        "stack by its `ray-pd-eks/cni-node-subnet` tag naming this cluster), attached to this "
        "cluster's nodes only (pd_constructs/cluster/vpc_cni.py `cni_statements`)",
        (PODS,),
        actions=_policy_actions(
            cni_statements(vpc_id="vpc-0", cluster_name="c", subnet_ids=["subnet-0"])
        ),
        service_accounts=("addon vpc-cni/aws-node",),
    ),
    Role(
        "cloudwatch-agent",
        ("Workload/Observability/AgentIdentity/Resource/Resource",),
        "the CloudWatch agent and Fluent Bit through Pod Identity: metrics, this cluster's log "
        "groups (pd_constructs/observability/observability.py `agent_statements`)",
        (PODS,),
        actions=_policy_actions(agent_statements("c")),
        service_accounts=("addon amazon-cloudwatch-observability/cloudwatch-agent",),
        when="observability=cloudwatch",
    ),
    Role(
        "load-balancer-controller",
        ("Workload/ApplicationEndpoint/Controller/ServiceAccount/Role/Resource",),
        "AWS Load Balancer Controller through Pod Identity: the policy of "
        "pd_constructs/endpoint/endpoint.py `controller_policy_statements` (its actions are "
        "read from there, not repeated here)",
        (PODS,),
        actions=_policy_actions(
            controller_policy_statements("arn:aws:elasticloadbalancing:r:a:targetgroup/t/0")
        ),
        service_accounts=("kube-system/aws-load-balancer-controller",),
        when="endpointExposure set",
    ),
    Role(
        "cluster-autoscaler",
        ("GpuAddons/ClusterAutoscaler/ServiceAccount/Role/Resource",),
        "Cluster Autoscaler through Pod Identity: resize the GPU node group's ASG",
        (PODS,),
        actions=(
            "autoscaling:DescribeAutoScalingGroups",
            "autoscaling:DescribeAutoScalingInstances",
            "autoscaling:DescribeLaunchConfigurations",
            "autoscaling:DescribeScalingActivities",
            "autoscaling:SetDesiredCapacity",
            "autoscaling:TerminateInstanceInAutoScalingGroup",
            "ec2:DescribeImages",
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeLaunchTemplateVersions",
            "ec2:GetInstanceTypesFromInstanceRequirements",
            "eks:DescribeNodegroup",
        ),
        service_accounts=("kube-system/cluster-autoscaler",),
        when="GPU autoscaling",
    ),
    Role(
        "model-fetch-s3",
        (
            "Workload/Workload/ModelFetch/Resource/Role/Resource",
            "Workload/Warmup/ModelFetch/Resource/Role/Resource",
        ),
        "the weights' fetchers through Pod Identity: read the staged model in S3",
        (PODS,),
        actions=("s3:GetObject", "s3:ListBucket"),
        service_accounts=(
            "{ns}/model-fetch",
            "{ns}/{rs}-ray-head",
            "ray-pd-eks-warmup/model-fetch",
        ),
        when="modelS3Uri set",
    ),
    Role(
        "model-fetch-token",
        (
            "Workload/Workload/ModelFetch/Resource/Role/Resource",
            "Workload/Warmup/ModelFetch/Resource/Role/Resource",
        ),
        "the weights' fetchers through Pod Identity: read the Hugging Face token secret",
        (PODS,),
        actions=("secretsmanager:GetSecretValue",),
        service_accounts=("{ns}/model-fetch", "ray-pd-eks-warmup/model-fetch"),
        when="hfTokenSecretArn set",
    ),
    Role(
        "kubectl-provider",
        ("Cluster/Cluster/Resource/KubectlProvider/Handler/ServiceRole/Resource",),
        "aws-cdk-lib's kubectl/helm function: cluster admin (it applies every manifest); "
        "reads the vendored Helm charts from the CDK asset bucket",
        (LAMBDA,),
        actions=("eks:DescribeCluster", "s3:GetBucket*", "s3:GetObject*", "s3:List*"),
        managed=(
            BASIC,
            VPC_ACCESS,
            "AmazonEC2ContainerRegistryReadOnly",
            "AmazonElasticContainerRegistryPublicReadOnly",
        ),
        access_policies=("AmazonEKSClusterAdminPolicy (cluster)",),
    ),
    Role(
        "readiness-poller",
        ("Cluster/Providers/Readiness/IsComplete/ServiceRole/Resource",),
        "the readiness check's poller: Kubernetes group ray-pd-eks:readiness only",
        (LAMBDA,),
        managed=(BASIC, VPC_ACCESS),
        kubernetes_groups=("ray-pd-eks:readiness",),
    ),
    Role(
        "recreate-poller",
        ("Cluster/Providers/Recreate/IsComplete/ServiceRole/Resource",),
        "the RayService recreate waiter: Kubernetes group ray-pd-eks:recreate only",
        (LAMBDA,),
        managed=(BASIC, VPC_ACCESS),
        kubernetes_groups=("ray-pd-eks:recreate",),
    ),
    Role(
        "ray-token-writer",
        ("Workload/Workload/RayAuthToken/Function/ServiceRole/Resource",),
        "the Ray token writer: Kubernetes group ray-pd-eks:ray-token-writer only",
        (LAMBDA,),
        managed=(BASIC, VPC_ACCESS),
        kubernetes_groups=("ray-pd-eks:ray-token-writer",),
    ),
    Role(
        "endpoint-probe",
        ("Cluster/Providers/EndpointProbe/Function/ServiceRole/Resource",),
        "the deploy's endpoint probe: reads the one app client's secret (its pool's ARN: the "
        "action has no client-level resource), no Kubernetes identity",
        (LAMBDA,),
        actions=(DESCRIBE_OWN_STACK, "cognito-idp:DescribeUserPoolClient"),
        managed=(BASIC, VPC_ACCESS),
        when="endpoint probe, Cognito",
    ),
    Role(
        "endpoint-probe-no-auth",
        ("Cluster/Providers/EndpointProbe/Function/ServiceRole/Resource",),
        "the deploy's endpoint probe without authentication: no Cognito, no Kubernetes identity",
        (LAMBDA,),
        actions=(DESCRIBE_OWN_STACK,),
        managed=(BASIC, VPC_ACCESS),
        when="endpoint probe, endpointAuth=none",
    ),
    Role(
        "rollback-aware-on-event",
        (
            "Cluster/Providers/Readiness/OnEvent/ServiceRole/Resource",
            "Cluster/Providers/Recreate/OnEvent/ServiceRole/Resource",
            "GpuNodes/GpuCapacityWatch/OnEvent/ServiceRole/Resource",
            "GpuNodes/ClusterActive/OnEvent/ServiceRole/Resource",
            # Kept for the upgrade, remove in the next release (ray_pd_eks/cross_stack.py).
            "Cluster/Providers/GpuCapacityWatch/OnEvent/ServiceRole/Resource",
        ),
        "on-event handlers: tell CloudFormation's rollback Update from a deploy (the stack of "
        "their custom resource)",
        (LAMBDA,),
        actions=(DESCRIBE_OWN_STACK,),
        managed=(BASIC,),
    ),
    Role(
        "gpu-az-chooser",
        ("GpuNodes/GpuAzChoice/Chooser/Function/ServiceRole/Resource",),
        "chooses the GPU AZ: read instance offerings and capacity reservations, and the subnet "
        "the GPU route table already serves (kept on Create)",
        (LAMBDA,),
        actions=(
            DESCRIBE_OWN_STACK,
            "ec2:DescribeCapacityReservations",
            "ec2:DescribeInstanceTypeOfferings",
            "ec2:DescribeRouteTables",
            "ec2:DescribeSubnets",
        ),
        managed=(BASIC,),
    ),
    Role(
        "gpu-az-chooser-kept",
        ("Cluster/GpuAzChooser/Function/ServiceRole/Resource",),
        "the previous release's GPU AZ chooser, kept for the upgrade (its custom resource's "
        "Delete); remove in the next release",
        (LAMBDA,),
        actions=(
            DESCRIBE_OWN_STACK,
            "ec2:DescribeCapacityReservations",
            "ec2:DescribeInstanceTypeOfferings",
        ),
        managed=(BASIC,),
    ),
    Role(
        "cluster-active-waiter",
        ("GpuNodes/ClusterActive/IsComplete/ServiceRole/Resource",),
        "the GPU node stack's wait for the control plane: describe the one cluster and the "
        "Cluster stack's status",
        (LAMBDA,),
        actions=(DESCRIBE_OWN_STACK, "eks:DescribeCluster"),
        managed=(BASIC,),
    ),
    Role(
        "gpu-capacity-watch",
        ("GpuNodes/GpuCapacityWatch/IsComplete/ServiceRole/Resource",),
        "watches the GPU node group's launches to fail fast on missing capacity, and the "
        "Cluster stack's status while the group is created (to fail at once when it rolls back)",
        (LAMBDA,),
        actions=(
            DESCRIBE_OWN_STACK,
            "autoscaling:DescribeScalingActivities",
            "eks:DescribeNodegroup",
        ),
        managed=(BASIC,),
    ),
    Role(
        "gpu-capacity-watch-kept",
        # Kept for the upgrade, remove in the next release (ray_pd_eks/cross_stack.py).
        ("Cluster/Providers/GpuCapacityWatch/IsComplete/ServiceRole/Resource",),
        "the previous release's capacity watch, kept for the upgrade (its custom resource's "
        "Delete); remove in the next release",
        (LAMBDA,),
        actions=("autoscaling:DescribeScalingActivities", "eks:DescribeNodegroup"),
        managed=(BASIC,),
    ),
    Role(
        "nodegroups-gone-on-event",
        ("Cluster/NodegroupsGone/OnEvent/ServiceRole/Resource",),
        "the cluster's delete guard, on-event: tells the stack's delete (or create rollback) "
        "from an update's cleanup (its own stack)",
        (LAMBDA,),
        actions=(DESCRIBE_OWN_STACK,),
        managed=(BASIC,),
    ),
    Role(
        "nodegroups-gone",
        ("Cluster/NodegroupsGone/IsComplete/ServiceRole/Resource",),
        "the cluster's delete guard: lists and describes this cluster's node groups only, "
        "and holds the cluster's delete until none is left",
        (LAMBDA,),
        actions=("eks:DescribeNodegroup", "eks:ListNodegroups"),
        managed=(BASIC,),
    ),
    Role(
        "gpu-node-template-tags",
        ("GpuNodes/NodeTemplateTags/Function/ServiceRole/Resource",),
        "tags the GPU Auto Scaling group with the Cluster Autoscaler's node-template hints "
        "(only node-template/* keys, only on this cluster's GPU node group's group)",
        (LAMBDA,),
        actions=(
            DESCRIBE_OWN_STACK,
            "autoscaling:CreateOrUpdateTags",
            "autoscaling:DeleteTags",
            "eks:DescribeNodegroup",
        ),
        managed=(BASIC,),
        when="GPU autoscaling",
    ),
    Role(
        "image-digests",
        ("Workload/Images/Function/ServiceRole/Resource",),
        "resolves the pinned images' digests in ECR",
        (LAMBDA,),
        actions=(DESCRIBE_OWN_STACK, "ecr:BatchGetImage"),
        managed=(BASIC,),
    ),
    Role(
        "provider-framework",
        (*_FRAMEWORK,),
        "aws-cdk-lib's Provider framework functions: invoke their handlers, start the waiter",
        (LAMBDA,),
        actions=("lambda:GetFunction", "lambda:InvokeFunction", "states:StartExecution"),
        managed=(BASIC,),
    ),
    Role(
        "kubectl-provider-framework",
        (
            "Cluster/Cluster/Resource/KubectlProvider/Provider/framework-onEvent/ServiceRole/Resource",
        ),
        "the kubectl provider's framework function (in the VPC)",
        (LAMBDA,),
        actions=("lambda:GetFunction", "lambda:InvokeFunction"),
        managed=(BASIC, VPC_ACCESS),
    ),
    Role(
        "provider-waiter",
        ("*/Provider/waiter-state-machine/Role/Resource",),
        "aws-cdk-lib's waiter state machines: invoke is-complete, write their logs",
        (STATES,),
        actions=(
            "lambda:InvokeFunction",
            "logs:CreateLogDelivery",
            "logs:CreateLogStream",
            "logs:DeleteLogDelivery",
            "logs:DescribeLogGroups",
            "logs:DescribeResourcePolicies",
            "logs:GetLogDelivery",
            "logs:ListLogDeliveries",
            "logs:PutLogEvents",
            "logs:PutResourcePolicy",
            "logs:UpdateLogDelivery",
        ),
    ),
    Role(
        "vpc-flow-logs",
        ("Network/Network/Vpc/FlowLog/IAMRole/Resource",),
        "VPC flow logs into their log group",
        ("Service:vpc-flow-logs.amazonaws.com",),
        actions=("logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"),
    ),
    Role(
        "restrict-default-sg",
        ("Cluster/DefaultSecurityGroup/Function/ServiceRole/Resource",),
        "strips the VPC default security group's two default rules (that group only)",
        (LAMBDA,),
        actions=("ec2:RevokeSecurityGroupEgress", "ec2:RevokeSecurityGroupIngress"),
        managed=(BASIC,),
    ),
    Role(
        "leftover-log-groups-check",
        ("Network/LeftoverLogGroups/Function/ServiceRole/Resource",),
        "stops a deploy first when a fixed-name log group of an earlier retained deployment "
        "exists (reads whether it exists, nothing else)",
        (LAMBDA,),
        actions=("logs:DescribeLogGroups",),
        managed=(BASIC,),
        when="retainLogs=true",
    ),
    Role(
        "access-log-auto-delete",
        ("Workload/CustomS3AutoDeleteObjectsCustomResourceProviderRole*",),
        "aws-cdk-lib's function that empties the access-log bucket on delete (its rights are "
        "in the bucket's policy)",
        (LAMBDA,),
        managed=(BASIC,),
        when="access logs deleted with the stack",
    ),
)

RBAC: tuple[RbacSubject, ...] = (
    RbacSubject(
        "rbac-readiness",
        "group:ray-pd-eks:readiness",
        "the readiness check (its access entry's group)",
        (
            "*: list nodes",
            "{ns}: create,get services/proxy[{rs}-serve-svc:8000]",
            "{ns}: get services/proxy[{rs}-head-svc:8265]",
            "{ns}: get ray.io/rayservices[{rs}]",
            "{ns}: get secrets[{rs}-ray-token]",
            "{ns}: list events",
            "{ns}: list pods",
        ),
        # The decode engines' NIXL counters through the pod proxy (kvproof.py).
        rules_when=(("servingMode=pd", "{ns}: get pods/proxy"),),
    ),
    RbacSubject(
        "rbac-recreate",
        "group:ray-pd-eks:recreate",
        "the RayService recreate waiter (its access entry's group)",
        (
            "{ns}: delete,get ray.io/rayservices[{rs}]",
            "{ns}: get ray.io/rayclusters",
            "{ns}: list pods",
        ),
    ),
    RbacSubject(
        "rbac-ray-token-writer",
        "group:ray-pd-eks:ray-token-writer",
        "the Ray token writer (its access entry's group)",
        ("{ns}: get,patch secrets[{rs}-ray-token]",),
    ),
)


_OPERATOR = kuberay_operator_identity()

CHART_ACCOUNTS: tuple[ChartAccount, ...] = (
    ChartAccount(
        "kuberay-operator",
        _OPERATOR.user,
        "the KubeRay operator (chart kuberay-operator, its own RBAC): the one user that may "
        "create the Ray pods and the RayCluster of our RayService",
        ("ray-pd-eks-ray-pods.{ns}", "ray-pd-eks-rayclusters.{ns}"),
    ),
)


def _check_table() -> None:
    ids = [r.id for r in ROLES] + [s.id for s in RBAC] + [a.id for a in CHART_ACCOUNTS]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise ValueError(f"identity ids appear twice: {sorted(duplicates)}")
    for subject in RBAC:
        if subject.when not in CONDITIONS:
            raise ValueError(f"identity {subject.id}: condition {subject.when!r} unknown")


_check_table()


def _cell(values: tuple[str, ...]) -> str:
    if len(values) > 20:
        return f"{len(values)} actions (see the row's source)"
    return "<br>".join(f"`{v}`" for v in values) or "—"


def markdown() -> str:
    """docs/identities.md, rendered from the table."""
    lines = [
        "# Every identity",
        "",
        "<!-- Rendered from pd_constructs/inventory/identities.py by "
        "`python -m pd_constructs.inventory.identities`;"
        " tests/test_identities.py fails when this file and the table differ. -->",
        "",
        "Every IAM role the stacks create, with its Pod Identity associations and EKS access "
        "entries, and every Kubernetes RBAC subject our manifests bind, with what each may do. "
        "The table lives in [`pd_constructs/inventory/identities.py`]"
        "(../pd_constructs/inventory/identities.py); "
        "`tests/test_identities.py` checks it two ways against the synthesized templates and "
        "manifests of several configurations: every role matches exactly one row and every "
        "row a role, with exactly the row's actions, managed policies, trusted principals, "
        "service accounts, Kubernetes groups and access policies; every bound RBAC subject is "
        "a row with exactly its rules. Resource scoping of each action is pinned by the tests "
        "of each construct; RBAC that Helm charts and operators create at deploy time (KubeRay, "
        "the AWS Load Balancer Controller, the Cluster Autoscaler, the CloudWatch add-on, "
        "KubeRay's autoscaler Role) is not in the templates and not in this table. "
        "`{ns}` is `namespace`, `{rs}` `rayServiceName`.",
        "",
        "## IAM roles",
        "",
        "| id | what | trusted by | actions | managed policies | Pod Identity | Kubernetes "
        "access | when |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in ROLES:
        access = _cell(r.kubernetes_groups + r.access_policies)
        trusted = ", ".join(p.removeprefix("Service:") for p in r.principals)
        lines.append(
            f"| {r.id} | {r.purpose} | {trusted} | {_cell(r.actions)} | {_cell(r.managed)} "
            f"| {_cell(r.service_accounts)} | {access} | {r.when} |"
        )
    lines += ["", "## Kubernetes RBAC subjects", "", "| id | subject | what | rules | when |"]
    lines += ["|---|---|---|---|---|"]
    for s in RBAC:
        lines.append(f"| {s.id} | `{s.subject}` | {s.purpose} | {_cell(s.rules_text)} | {s.when} |")
    lines += [
        "",
        "## Service accounts of charts that our manifests name",
        "",
        "Created by their chart, with the chart's RBAC; listed because our admission policies "
        "admit them by name. The name is derived from the chart's release and naming values "
        "(`pd_constructs/common/helm.py`, `kuberay_operator_identity`); "
        "`tests/test_operator_identity.py` checks that the policies, this table and the "
        "installed chart name the same account.",
        "",
        "| id | subject | what | named by |",
        "|---|---|---|---|",
    ]
    for a in CHART_ACCOUNTS:
        lines.append(f"| {a.id} | `{a.subject}` | {a.purpose} | {_cell(a.named_by)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
