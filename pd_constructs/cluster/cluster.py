"""The EKS cluster, its node groups and the GPU device plugins."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from aws_cdk import (
    Annotations,
    CfnCondition,
    CfnResource,
    CfnTag,
    DefaultStackSynthesizer,
    Duration,
    Fn,
    RemovalPolicy,
    Stack,
    Token,
    lambda_layer_kubectl_v35,
    lambda_layer_kubectl_v36,
)
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.aws_lambda import ILayerVersion
from constructs import Construct

from pd_constructs.cluster.vpc_cni import NODE_TAG
from pd_constructs.common.eks_types import as_icluster, control_plane_security_group
from pd_constructs.common.helm import (
    EFA_DEVICE_PLUGIN,
    NVIDIA_DEVICE_PLUGIN,
    HelmAddon,
    efa_device_plugin_repository,
)
from pd_constructs.common.logs_key import allow_cloudwatch_logs
from pd_constructs.common.nag import (
    LAMBDA_BASIC,
    LAMBDA_VPC,
    MANAGED_POLICY,
    acknowledge,
    function_versions_finding,
)
from pd_constructs.common.templates import load_yaml
from ray_pd_eks import instance_types
from ray_pd_eks.config import GPU_NODEGROUP_PREFIX_MAX, set_hint
from ray_pd_eks.monitoring import control_plane_log_group

GPU_TAINT = eks.TaintSpec(key="nvidia.com/gpu", value="true", effect=eks.TaintEffect.NO_SCHEDULE)
SYSTEM_LABELS = {"role": "system"}
GPU_LABELS = {"role": "gpu-worker", "nvidia.com/gpu.present": "true"}
GPU_AMI_TYPE = eks.NodegroupAmiType.AL2023_X86_64_NVIDIA
# The VPC CNI's permissions (AmazonEKS_CNI_Policy) belong to aws-node's own identity
# (pd_constructs/cluster/vpc_cni.py), not to every process on the node; image pulls need only
# ECR's pull actions (PullOnly, not ReadOnly's listing and describing).
_NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryPullOnly",
)


def kubectl_layer(scope: Construct, kubernetes_version: str) -> ILayerVersion:
    """The kubectl/helm Lambda layer whose number matches the cluster's Kubernetes version."""
    if kubernetes_version == "1.35":
        return lambda_layer_kubectl_v35.KubectlV35Layer(scope, "KubectlLayer")
    if kubernetes_version == "1.36":
        return lambda_layer_kubectl_v36.KubectlV36Layer(scope, "KubectlLayer")
    raise ValueError(f"no kubectl layer for Kubernetes {kubernetes_version}")


class PdCluster(Construct):
    """EKS control plane with secrets envelope encryption, all control-plane log types, access
    entries for the configured administrators, and a kubectl provider in the private subnets.

    The API endpoint is private unless ``endpoint_public_cidrs`` is given; then it is public and
    private, with the public side open only to those CIDRs. The kubectl provider's log groups
    and the control plane's (``/aws/eks/<cluster>/cluster``, created before the cluster so EKS
    writes into it instead of creating one that outlives the stack) keep
    ``log_retention_days`` and go with the stack unless ``log_removal_policy`` retains them.

    The kubectl provider's function has a security group of its own (``kubectl_security_group``)
    instead of the cluster security group, whose members may reach every node and pod: it may
    send HTTPS out (the Kubernetes API through an ingress rule on the control plane's group;
    the EKS API for ``aws eks update-kubeconfig``, the Helm chart repositories and S3 through
    the NAT gateway) and accepts nothing. Its way in to the API server is a rule on the control
    plane's own security group (``control_plane_security_group``, on the control plane's
    network interfaces only), not on the cluster security group that every node carries.

    The control plane's interfaces sit in ``control_plane_subnets`` (two or more AZs), which
    no node group uses (:mod:`ray_pd_eks.vpc_layout`).

    Without ``admin_principal_arns`` nobody can administer the cluster: a synth warning says so
    unless ``warn_without_admins`` is false (where something else refuses such a deploy).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        cluster_name: str,
        kubernetes_version: str,
        log_retention_days: int,
        log_removal_policy: RemovalPolicy,
        control_plane_subnets: Sequence[ec2.ISubnet],
        admin_principal_arns: Sequence[str] = (),
        endpoint_public_cidrs: Sequence[str] = (),
        warn_without_admins: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        if len(control_plane_subnets) < 2:
            raise ValueError(
                f"PdCluster control_plane_subnets: {len(control_plane_subnets)} given; EKS needs "
                "subnets in at least two Availability Zones"
            )
        self.secrets_key = kms.Key(
            self,
            "SecretsKey",
            description=(
                f"Envelope encryption of Kubernetes secrets and control-plane logs of EKS "
                f"cluster {cluster_name}"
            ),
            enable_key_rotation=True,
            pending_window=Duration.days(7),
            removal_policy=RemovalPolicy.DESTROY,
        )
        control_plane_logs_name = control_plane_log_group(cluster_name)
        # The control plane's audit and API server logs are encrypted with this stack's key,
        # which the cluster needs anyway (a key of their own would be created before the log
        # group, and the log group before the cluster: one more step on the deploy's critical
        # path). A retained log group needs its key, so retainLogs retains the key too.
        allow_cloudwatch_logs(self.secrets_key, [control_plane_logs_name])
        self.secrets_key.apply_removal_policy(
            RemovalPolicy.RETAIN
            if log_removal_policy == RemovalPolicy.RETAIN
            else RemovalPolicy.DESTROY
        )
        self.control_plane_logs = logs.CfnLogGroup(
            self,
            "ControlPlaneLogs",
            log_group_name=control_plane_logs_name,
            retention_in_days=log_retention_days,
            kms_key_id=self.secrets_key.key_arn,
        )
        self.control_plane_logs.apply_removal_policy(log_removal_policy)
        self.kubectl_security_group = ec2.SecurityGroup(
            self,
            "KubectlSecurityGroup",
            vpc=vpc,
            description="kubectl provider: HTTPS out (Kubernetes API, EKS API, Helm repositories)",
            allow_all_outbound=False,
        )
        # Helm pulls charts from public repositories, and the handler runs `aws eks
        # update-kubeconfig` against the regional EKS endpoint: both only through the NAT.
        self.kubectl_security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS: EKS API, Helm chart repositories, S3"
        )
        endpoint = (
            eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*endpoint_public_cidrs)
            if endpoint_public_cidrs
            else eks.EndpointAccess.PRIVATE
        )
        self.cluster = eks.Cluster(
            self,
            "Resource",
            cluster_name=cluster_name,
            version=eks.KubernetesVersion.of(kubernetes_version),
            vpc=vpc,
            # The control plane's interfaces get subnets no node group uses, so "from the API
            # server" (the NetworkPolicies' ipBlock peers) is not "from any system node".
            vpc_subnets=[ec2.SubnetSelection(subnets=list(control_plane_subnets))],
            endpoint_access=endpoint,
            secrets_encryption_key=self.secrets_key,
            cluster_logging=[
                eks.ClusterLoggingTypes.API,
                eks.ClusterLoggingTypes.AUDIT,
                eks.ClusterLoggingTypes.AUTHENTICATOR,
                eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                eks.ClusterLoggingTypes.SCHEDULER,
            ],
            # Node groups are added explicitly; no Auto Mode, no default capacity.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # The CloudFormation execution role is no person; administrators are explicit.
            bootstrap_cluster_creator_admin_permissions=False,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, kubernetes_version),
                private_subnets=vpc.private_subnets,
                security_groups=[self.kubectl_security_group],
            ),
            output_config_command=False,
        )
        # Only the EKS cluster resource waits for its log group (which waits for the key):
        # the cluster role and the rest of the construct start at once.
        cfn_cluster = self.cluster.node.default_child
        assert isinstance(cfn_cluster, CfnResource)
        cfn_cluster.add_resource_dependency(self.control_plane_logs)
        self.control_plane_security_group = control_plane_security_group(self.cluster)
        ec2.CfnSecurityGroupIngress(
            self,
            "KubectlClusterIngress",
            group_id=self.control_plane_security_group.security_group_id,
            source_security_group_id=self.kubectl_security_group.security_group_id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description="kubectl provider to the Kubernetes API",
        )
        _own_kubectl_log_groups(self.cluster, log_retention_days, log_removal_policy)
        _kubectl_functions_in(self.cluster, vpc.private_subnets)
        for i, arn in enumerate(admin_principal_arns):
            self.cluster.grant_access(
                f"Admin{i}",
                arn,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
        if not admin_principal_arns and warn_without_admins:
            Annotations.of(self).add_warning_v2(
                "ray-pd-eks:noAdmins",
                "adminPrincipalArns is empty: NOBODY can administer this cluster (no access "
                "entry: kubectl and ray-pd-eks status/smoke are denied, for you too); add "
                "yourself with `ray-pd-eks settings --add-admin-me`",
            )
        acknowledge(
            self.cluster,
            "AwsSolutions-IAM4",
            "EKS requires AmazonEKSClusterPolicy on the cluster role; the kubectl provider's "
            "functions use AWSLambdaBasicExecutionRole/AWSLambdaVPCAccessExecutionRole for "
            "their own logs and network interfaces; it may pull the layer's public images.",
            findings=[
                MANAGED_POLICY + "AmazonEKSClusterPolicy",
                LAMBDA_BASIC,
                LAMBDA_VPC,
                MANAGED_POLICY + "AmazonEC2ContainerRegistryReadOnly",
                _ecr_public_finding(self.cluster),
            ],
        )
        acknowledge(
            self.cluster,
            "AwsSolutions-IAM5",
            "Generated by aws-cdk-lib's kubectl provider: its framework may invoke any version "
            "of its own handler (<arn>:*).",
            findings=[function_versions_finding(_kubectl_handler(self.cluster))],
        )
        acknowledge(
            self.cluster,
            "AwsSolutions-IAM5",
            "aws-cdk-lib's grant for the vendored Helm charts (assets/charts/): the kubectl "
            "provider reads the chart assets from this account's CDK asset bucket (the S3 "
            "read grant set on the bucket's objects).",
            findings=chart_asset_read_findings(Stack.of(self)),
        )
        acknowledge(
            self.cluster,
            "AwsSolutions-L1",
            "The kubectl provider's runtime is chosen by aws-cdk-lib to match the kubectl layer.",
        )
        if endpoint_public_cidrs:
            acknowledge(
                self.cluster,
                "AwsSolutions-EKS1",
                "endpointPublicCidrs asks for a public endpoint; it is open only to those CIDRs.",
            )


def chart_asset_read_findings(stack: Stack) -> list[str]:
    """How cdk-nag names the wildcards of ``Asset.bucket.grantRead`` to the kubectl provider's
    role, which ``eks.HelmChart`` adds for a chart asset: the S3 read actions on the objects
    of the stack's CDK asset bucket (``cdk-<qualifier>-assets-<account>-<region>``)."""
    account = "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account
    region = "<AWS::Region>" if Token.is_unresolved(stack.region) else stack.region
    qualifier = (
        stack.node.try_get_context("@aws-cdk/core:bootstrapQualifier")
        or DefaultStackSynthesizer.DEFAULT_QUALIFIER
    )
    bucket = f"cdk-{qualifier}-assets-{account}-{region}"
    # With an explicit region aws-cdk-lib writes the partition as a literal.
    partition = "<AWS::Partition>"
    if not Token.is_unresolved(stack.region):
        partition = (
            "aws-cn"
            if stack.region.startswith("cn-")
            else "aws-us-gov"
            if stack.region.startswith("us-gov-")
            else "aws"
        )
    return [
        "Action::s3:GetBucket*",
        "Action::s3:GetObject*",
        "Action::s3:List*",
        f"Resource::arn:{partition}:s3:::{bucket}/*",
    ]


def _own_kubectl_log_groups(
    cluster: eks.Cluster, retention_days: int, removal_policy: RemovalPolicy
) -> None:
    """aws-cdk-lib gives the kubectl provider's functions log groups of its own (feature flag
    ``@aws-cdk/aws-lambda:useCdkManagedLogGroup``) that are RETAINed with two years' retention,
    so every ``cdk destroy`` would leave two log groups behind. Apply the app's settings."""
    for child in cluster.node.find_child("KubectlProvider").node.find_all():
        if isinstance(child, logs.CfnLogGroup):
            child.retention_in_days = retention_days
            child.apply_removal_policy(removal_policy)


def _kubectl_functions_in(cluster: eks.Cluster, subnets: Sequence[ec2.ISubnet]) -> None:
    """Put the kubectl provider's functions (its handler and its Provider framework's
    on-event function) in ``subnets``.

    aws-cdk-lib 2.275.0 ignores ``KubectlProviderOptions.private_subnets`` when the endpoint
    has private access: ``Cluster`` then hands the provider the private subnets of its own
    ``vpc_subnets`` (aws-eks-v2 ``cluster.js``: ``kubectlSubnets = privateSubnets``, computed
    by ``selectPrivateSubnets``), here the control plane's isolated /28s, which must hold
    nothing but the control plane's interfaces (:mod:`ray_pd_eks.vpc_layout`): the
    NetworkPolicies admit those addresses as the API server, and EKS needs their free
    addresses for an upgrade. So the functions' ``VpcConfig.SubnetIds`` are overridden."""
    ids = [s.subnet_id for s in subnets]
    for child in cluster.node.find_child("KubectlProvider").node.find_all():
        if isinstance(child, lambda_.CfnFunction) and child.vpc_config is not None:
            child.add_property_override("VpcConfig.SubnetIds", ids)
    # aws-cdk-lib warns about the isolated subnets it chose; the override above replaces them.
    Annotations.of(cluster).acknowledge_warning(
        "@aws-cdk/aws-eks:isolatedSubnetsForKubectlPrivateSubnets",
        "the kubectl provider's functions are moved to the private subnets (NAT egress)",
    )


def _kubectl_handler(cluster: eks.Cluster) -> lambda_.IFunction:
    handler = cluster.node.find_child("KubectlProvider").node.find_child("Handler")
    assert isinstance(handler, lambda_.Function)
    return handler


def _ecr_public_finding(cluster: eks.Cluster) -> str:
    """aws-cdk-lib attaches ECR public read-only to the kubectl handler behind a condition."""
    condition = _kubectl_handler(cluster).node.find_child("HasEcrPublic")
    assert isinstance(condition, CfnCondition)
    logical_id = Stack.of(cluster).get_logical_id(condition)
    arn = (
        '{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},'
        '":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]}'
    )
    return f'Policy::{{"Fn::If":["{logical_id}",{arn},{{"Ref":"AWS::NoValue"}}]}}'


def _node_role(scope: Construct) -> iam.Role:
    role = iam.Role(scope, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    for name in _NODE_POLICIES:
        role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(name))
    acknowledge(
        role,
        "AwsSolutions-IAM4",
        "The AWS managed policies EKS requires for worker nodes: node registration and "
        "image pulls from ECR (pull actions only); the CNI's policy is on aws-node's own role.",
        findings=[MANAGED_POLICY + name for name in _NODE_POLICIES],
    )
    return role


NODEADM_CONTENT_TYPE = "application/node.eks.aws"


def node_config() -> dict[str, Any]:
    """The nodeadm ``NodeConfig`` every node gets: SOCI parallel pull and unpack
    (``FastImagePull``, assets/nodeadm/node-config.yaml)."""
    return dict(load_yaml("nodeadm/node-config.yaml"))


def gpu_node_config(local_nvme: bool) -> dict[str, Any]:
    """The nodeadm ``NodeConfig`` of the GPU nodes: :func:`node_config`, plus NVMe RAID0 for
    containerd, kubelet and the model cache when the instance type has instance store."""
    config = node_config()
    if local_nvme:
        config["spec"] = {**config["spec"], **load_yaml("nodeadm/gpu-node-config.yaml")["spec"]}
    return config


def nodeadm_user_data(node_config: Mapping[str, Any]) -> str:
    """MIME multi-part user data carrying one NodeConfig part. Managed node groups require the
    multi-part form; EKS merges in its own part (the cluster's endpoint and CA)."""
    user_data = ec2.MultipartUserData()
    user_data.add_part(
        ec2.MultipartBody.from_raw_body(
            content_type=NODEADM_CONTENT_TYPE,
            body=yaml.safe_dump(dict(node_config), sort_keys=False),
        )
    )
    return user_data.render()


def _launch_template_data(
    root_volume_gib: int,
    network_interfaces: list[ec2.CfnLaunchTemplate.NetworkInterfaceProperty] | None = None,
    placement_group: str | None = None,
    *,
    root_volume_iops: int | None = None,
    root_volume_throughput: int | None = None,
    user_data: str | None = None,
    capacity_reservation_id: str = "",
    cluster_name: str = "",
) -> ec2.CfnLaunchTemplate.LaunchTemplateDataProperty:
    """IMDSv2 only, with hop limit 1: the node and its host-network pods (aws-node, kube-proxy,
    the EKS Pod Identity agent) reach IMDS, pods on the pod network do not, so no pod can take
    the node role's credentials (docs/security.md); an encrypted gp3 root volume (with raised
    IOPS/throughput when it holds images and caches), optional nodeadm user data and an
    optional targeted capacity reservation. With ``cluster_name``, every instance launched is
    tagged ``cluster.k8s.amazonaws.com/name=<cluster_name>``: the VPC CNI's role may attach
    network interfaces to exactly those instances (pd_constructs/cluster/vpc_cni.py)."""
    return ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
        tag_specifications=(
            [
                ec2.CfnLaunchTemplate.TagSpecificationProperty(
                    resource_type="instance",
                    tags=[CfnTag(key=NODE_TAG, value=cluster_name)],
                )
            ]
            if cluster_name
            else None
        ),
        metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
            http_endpoint="enabled",
            http_tokens="required",
            http_put_response_hop_limit=1,
        ),
        block_device_mappings=[
            ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                device_name="/dev/xvda",
                ebs=ec2.CfnLaunchTemplate.EbsProperty(
                    volume_size=root_volume_gib,
                    volume_type="gp3",
                    iops=root_volume_iops,
                    throughput=root_volume_throughput,
                    encrypted=True,
                    delete_on_termination=True,
                ),
            )
        ],
        network_interfaces=network_interfaces,
        placement=(
            ec2.CfnLaunchTemplate.PlacementProperty(group_name=placement_group)
            if placement_group
            else None
        ),
        user_data=Fn.base64(user_data) if user_data else None,
        capacity_reservation_specification=(
            ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                    capacity_reservation_id=capacity_reservation_id
                )
            )
            if capacity_reservation_id
            else None
        ),
    )


# The Cluster Autoscaler's AWS GPU label (cloudprovider/aws/aws_cloud_provider.go, GPULabel):
# on a node carrying it, CA waits for the GPUs to be advertised before it counts the node as
# ready, instead of adding yet another node for the still-pending pod.
CA_GPU_LABEL = "k8s.amazonaws.com/accelerator"


def gpu_labels(spec: instance_types.InstanceSpec, *, scales: bool) -> dict[str, str]:
    """The GPU nodes' labels; with the Cluster Autoscaler (``scales``) also its GPU label."""
    if not scales:
        return dict(GPU_LABELS)
    return {**GPU_LABELS, CA_GPU_LABEL: f"nvidia-{spec.gpu_model.lower()}"}


def efa_network_interfaces(
    spec: instance_types.InstanceSpec, groups: Sequence[str]
) -> list[ec2.CfnLaunchTemplate.NetworkInterfaceProperty]:
    """Every EFA interface the instance type offers, one per network card, as EC2's guide
    ("Maximize network bandwidth on Amazon EC2 instances with multiple network cards", the
    P5/P5e/P5en configuration that keeps one IP address) lays them out: the primary (card 0,
    device index 0) is EFA with ENA and carries the node's IP address; each further card gets
    device index 1, EFA-only where the type supports it (``spec.efa_only``), else EFA with ENA.
    A pod reaches them through the EFA device plugin (``vpc.amazonaws.com/efa``)."""
    interfaces = []
    for position, card in enumerate(spec.efa_network_cards):
        primary = position == 0
        interfaces.append(
            ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                device_index=0 if primary else 1,
                network_card_index=card,
                interface_type="efa" if primary or not spec.efa_only else "efa-only",
                groups=list(groups),
                delete_on_termination=True,
            )
        )
    return interfaces


class SystemNodeGroup(Construct):
    """CPU nodes (AL2023) for system pods, the KubeRay operator and the Ray head;
    labelled ``role=system``; fixed size. The gp3 root volume gets ``root_volume_iops`` and
    ``root_volume_throughput`` (default: gp3's baseline), since the head's image lands there,
    and nodeadm turns on SOCI parallel pull (:func:`node_config`) for that image."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        instance_type: str,
        node_count: int,
        root_volume_gib: int,
        root_volume_iops: int | None = None,
        root_volume_throughput: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_data=_launch_template_data(
                root_volume_gib,
                root_volume_iops=root_volume_iops,
                root_volume_throughput=root_volume_throughput,
                user_data=nodeadm_user_data(node_config()),
                cluster_name=cluster.cluster_name,
            ),
        )
        self.nodegroup = eks.Nodegroup(
            self,
            "Resource",
            cluster=as_icluster(cluster),
            nodegroup_name="system",
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            instance_types=[ec2.InstanceType(instance_type)],
            min_size=node_count,
            desired_size=node_count,
            max_size=node_count,
            labels=SYSTEM_LABELS,
            node_role=_node_role(self),
            launch_template_spec=eks.LaunchTemplateSpec(
                id=template.ref, version=template.attr_latest_version_number
            ),
        )


class EfaGpuNodeGroup(Construct):
    """The GPU node group (``node_count`` nodes at creation, between ``min_size`` and
    ``max_size``, both ``node_count`` unless given): AL2023 NVIDIA AMI, one subnet (one AZ,
    because EFA does not cross AZs), a cluster placement group, and a launch template with
    every EFA interface the instance type offers (:func:`efa_network_interfaces`), each
    carrying both the cluster security group and an EFA security group that allows all
    traffic to and from itself (EFA's requirement). Nodes are labelled ``role=gpu-worker`` and
    ``nvidia.com/gpu.present=true`` (plus the Cluster Autoscaler's GPU label when the group
    scales) and tainted ``nvidia.com/gpu=true:NoSchedule`` so only GPU workloads land there.

    Storage: with a ``node_config`` whose ``localStorage`` is NVMe RAID0, images and caches
    live on instance store and the root volume only holds the OS; otherwise the root volume
    gets ``root_volume_iops`` and ``root_volume_throughput``. Capacity:
    ``capacity_reservation_id`` targets an On-Demand Capacity Reservation, and node updates
    then replace one node at a time, terminating it before launching its replacement (EKS's
    ``MINIMAL`` update strategy; default: launch first). ``placement_group_name`` uses an
    existing placement group (the one a reservation was created in); without it the group
    gets a cluster placement group of its own, unless a reservation is targeted (a
    reservation is usable in a cluster placement group only if it was created in that group).

    ``cluster`` may be an imported cluster (``eks.Cluster.from_cluster_attributes``) with a
    ``vpc`` and a ``cluster_security_group_id``: its name and that group are all the group and
    its launch template read (the GPU node stack names the cluster by its configured name).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        subnet: ec2.ISubnet,
        nodegroup_name: str,
        instance_type: str,
        node_count: int,
        root_volume_gib: int,
        node_config: Mapping[str, Any] | None = None,
        root_volume_iops: int | None = None,
        root_volume_throughput: int | None = None,
        capacity_reservation_id: str = "",
        placement_group_name: str = "",
        min_size: int | None = None,
        max_size: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        min_size = node_count if min_size is None else min_size
        max_size = node_count if max_size is None else max_size
        if not min_size <= node_count <= max_size:
            raise ValueError(
                f"EfaGpuNodeGroup: node_count {node_count} must lie within "
                f"min_size {min_size}..max_size {max_size}"
            )
        self.efa_security_group = ec2.SecurityGroup(
            self,
            "EfaSecurityGroup",
            vpc=cluster.vpc,
            description="EFA: all traffic to and from members of this group",
            allow_all_outbound=False,
        )
        self.efa_security_group.add_ingress_rule(
            self.efa_security_group, ec2.Port.all_traffic(), "EFA traffic from the GPU nodes"
        )
        self.efa_security_group.add_egress_rule(
            self.efa_security_group, ec2.Port.all_traffic(), "EFA traffic to the GPU nodes"
        )
        self.placement_group: ec2.PlacementGroup | None = None
        placement = placement_group_name or None
        if not placement and not capacity_reservation_id:
            self.placement_group = ec2.PlacementGroup(
                self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER
            )
            placement = self.placement_group.placement_group_name
        elif not placement:
            Annotations.of(self).add_warning_v2(
                "ray-pd-eks:noPlacementGroup",
                "gpuCapacityReservationId is set without gpuPlacementGroupName: the GPU nodes "
                "launch without a cluster placement group (a reservation is usable in one only "
                "if it was created in it). Create the reservation in a cluster placement group "
                f"and set it with {set_hint('gpuPlacementGroupName', '<name>')} for the lowest "
                "EFA latency.",
            )
        on_nvme = bool(
            node_config and "localStorage" in node_config.get("spec", {}).get("instance", {})
        )
        spec = instance_types.gpu_spec(instance_type)
        if spec is None:
            raise ValueError(f"EfaGpuNodeGroup: {instance_type} is not an EFA GPU instance type")
        # With explicit network interfaces EKS no longer adds the cluster security group by
        # itself, so it is listed here beside the EFA group.
        self.network_interfaces = efa_network_interfaces(
            spec,
            [cluster.cluster_security_group_id, self.efa_security_group.security_group_id],
        )
        template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_data=_launch_template_data(
                root_volume_gib,
                network_interfaces=self.network_interfaces,
                placement_group=placement,
                root_volume_iops=None if on_nvme else root_volume_iops,
                root_volume_throughput=None if on_nvme else root_volume_throughput,
                user_data=nodeadm_user_data(node_config) if node_config else None,
                capacity_reservation_id=capacity_reservation_id,
                cluster_name=cluster.cluster_name,
            ),
        )
        self.launch_template = template
        self.spec = spec
        self.labels = gpu_labels(spec, scales=max_size > min_size)
        self.nodegroup = eks.Nodegroup(
            self,
            "Resource",
            cluster=cluster,
            nodegroup_name=nodegroup_name,
            ami_type=GPU_AMI_TYPE,
            # The instance type is set on the resource below, not here: aws-cdk-lib 2.275's
            # isGpuInstanceType (aws-eks-v2/lib/private/nodegroup.js) knows P2-P4D and G3-G6E
            # but not P5/P5e/P5en, so given instance_types it refuses the NVIDIA AMI for those
            # ("AmiTypeDoesNotMatchInstanceArchitecture"). With a launch template the AMI type
            # is passed through as given; every type of instance_types.EFA_GPU_TYPES is an
            # x86_64 NVIDIA type (tests/test_gpu_types.py synthesizes each).
            min_size=min_size,
            desired_size=node_count,
            max_size=max_size,
            subnets=ec2.SubnetSelection(subnets=[subnet]),
            labels=self.labels,
            taints=[GPU_TAINT],
            node_role=_node_role(self),
            launch_template_spec=eks.LaunchTemplateSpec(
                id=template.ref, version=template.attr_latest_version_number
            ),
        )
        resource = self.nodegroup.node.default_child
        assert isinstance(resource, eks.CfnNodegroup)
        resource.instance_types = [instance_type]
        if capacity_reservation_id:
            # The launch template targets the reservation by id, and EC2 fails a launch past its
            # free instances instead of falling back to On-Demand. EKS's default update launches
            # the replacement nodes before it drains the old ones (up to two more in a one-AZ
            # group), which a reservation sized for the group has no room for; MINIMAL
            # terminates each old node first, freeing the slot its replacement launches into
            # (EKS API Reference, NodegroupUpdateConfig.updateStrategy).
            resource.update_config = eks.CfnNodegroup.UpdateConfigProperty(
                max_unavailable=1, update_strategy="MINIMAL"
            )


class GpuDevicePlugins(Construct):
    """The EFA and NVIDIA device plugins as pinned Helm charts, on the GPU nodes only.

    Install them after the GPU node group (Helm waits for the DaemonSets to be ready), so on
    ``cdk destroy`` they are removed before the nodes go: the GpuAddons stack, which depends
    on the GPU node stack, does both.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        gpu_instance_type: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.efa = HelmAddon(
            self,
            "Efa",
            cluster=cluster,
            release=EFA_DEVICE_PLUGIN,
            overrides={
                "supportedInstanceLabels": {"values": [gpu_instance_type]},
                # EKS's registry in the deploy region, not the chart's us-west-2 default: no
                # cross-region pull through the NAT gateway, and the right account where the
                # region's registry is not 602401143452's. The node role's
                # AmazonEC2ContainerRegistryPullOnly covers the pull.
                "image": {"repository": efa_device_plugin_repository(self)},
            },
        )
        self.nvidia = HelmAddon(self, "Nvidia", cluster=cluster, release=NVIDIA_DEVICE_PLUGIN)


def gpu_nodegroup_name(
    prefix: str, availability_zone: str, *, instance_type: str, ami_type: eks.NodegroupAmiType
) -> str:
    """``<prefix>-<az>-<8 hex>``: the GPU node group's name, derived from everything whose
    change makes CloudFormation replace the node group (the subnet, i.e. the AZ, the instance
    type and the AMI type). CloudFormation cannot replace a resource with a fixed custom name,
    so a new name per replacement is what lets a move to another AZ (or another GPU type)
    succeed in one deploy: the new group is created, then the old one deleted. The name is
    known before the group exists (``availability_zone`` may be a deploy-time token), so the
    capacity watch can look the group up while CloudFormation creates it.
    """
    if not Token.is_unresolved(prefix) and len(prefix) > GPU_NODEGROUP_PREFIX_MAX:
        raise ValueError(
            f"gpu_nodegroup_name prefix {prefix!r}: at most {GPU_NODEGROUP_PREFIX_MAX} characters"
        )
    digest = hashlib.sha256(f"{instance_type}|{ami_type.value}".encode()).hexdigest()[:8]
    if Token.is_unresolved(availability_zone):
        return Fn.join("-", [prefix, availability_zone, digest])
    return f"{prefix}-{availability_zone}-{digest}"
