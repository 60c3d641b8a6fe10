"""The Amazon VPC CNI as a managed EKS add-on, with NetworkPolicy enforcement on and its own
identity, so the node role no longer carries the CNI's EC2 permissions.

EKS installs the VPC CNI on every new cluster as a self-managed DaemonSet (``aws-node``) that
uses the node role. The managed add-on takes it over (``resolveConflicts: OVERWRITE``), pinned to
``vpcCniAddonVersion``; ``enableNetworkPolicy: "true"`` in its configuration values starts the
network-policy agent (``aws-eks-nodeagent``) beside it, which enforces the NetworkPolicies the
app applies (pd_constructs/network/network_policy.py). ``aws-node`` gets ``AmazonEKS_CNI_Policy``
through EKS Pod Identity (the add-on's ``podIdentityAssociations``; vpc-cni supports Pod
Identity), from a role only this cluster can use. ``preserveOnDelete`` is off: ``cdk destroy``
removes the add-on with the cluster instead of leaving an unmanaged DaemonSet behind.

The role does not carry ``AmazonEKS_CNI_Policy`` (every network interface of the region) but
:func:`cni_statements`, the CNI project's "scope-down IAM policy per EKS cluster" for IPv4
(aws/amazon-vpc-cni-k8s ``docs/iam-policy.md``) narrowed further: new interfaces only in the
node subnets (the private ones here by ARN, the GPU subnet of its own stack by its
:data:`CNI_SUBNET_TAG` tag), every network-interface write conditioned on this cluster's VPC
(``ec2:Vpc``; the sample's cluster-name tag is set only when the CNI knows ``CLUSTER_NAME``),
the instance side on the tag our launch templates put on every node (:data:`NODE_TAG`), and
ARNs on this account
and region. Root on a node (which reaches these credentials) can then create interfaces in the
node subnets and manage network interfaces of this VPC and attach them to this cluster's nodes,
not those of any other VPC or instance, and not in the control plane's subnets.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from pd_constructs.common.eks_types import as_icluster
from pd_constructs.common.nag import acknowledge
from pd_constructs.common.pod_identity import cluster_arn, pod_identity_principal

CNI_POLICY = "AmazonEKS_CNI_Policy"  # what the role no longer carries
CNI_SERVICE_ACCOUNT = "aws-node"  # in kube-system
# The tag every node of this cluster carries from its launch template
# (pd_constructs/cluster/cluster.py), the one the CNI itself puts on the interfaces it creates
# when it knows the cluster's name.
NODE_TAG = "cluster.k8s.amazonaws.com/name"
# The tag, with the cluster's name as its value, of a node subnet created in another stack than
# the CNI's role (the GPU subnet, in the GPU node stack): the role may create interfaces in a
# subnet of this VPC that carries it, without that stack attaching a policy to the role (an
# import from the Cluster stack). The Service Authorization Reference lists
# aws:ResourceTag/${TagKey} among the condition keys of ec2:CreateNetworkInterface's subnet
# resource (cfn-lint 1.58's data/AdditionalSpecs/Policies.json, ec2 "subnet").
CNI_SUBNET_TAG = "ray-pd-eks/cni-node-subnet"
# Read-only calls the CNI makes (the sample policy's Describe list, plus DescribeSecurityGroups
# of the generic one); EC2 Describe* calls support no resource-level scoping.
DESCRIBE_ACTIONS = (
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeTags",
)
INTERFACE_ACTIONS = (
    "ec2:AssignPrivateIpAddresses",
    "ec2:AttachNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "ec2:DetachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:UnassignPrivateIpAddresses",
)


def _ec2_arn(resource: str) -> str:
    return f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}:{resource}"


def _in_vpc(vpc_id: str) -> dict[str, dict[str, str]]:
    return {"ArnEquals": {"ec2:Vpc": _ec2_arn(f"vpc/{vpc_id}")}}


def subnet_arn(subnet_id: str) -> str:
    return _ec2_arn(f"subnet/{subnet_id}")


def create_in_subnets(
    *, vpc_id: str, subnet_ids: Sequence[str], sid: str = "CreateInterfaceInNodeSubnets"
) -> iam.PolicyStatement:
    """``ec2:CreateNetworkInterface`` in exactly these subnets (the node subnets: the CNI
    creates a node's extra interfaces in the subnet of its primary one), not in every subnet
    of the VPC: not in the control plane's /28s, whose addresses the NetworkPolicies admit as
    the API server (:mod:`ray_pd_eks.vpc_layout`), nor in the public ones."""
    return iam.PolicyStatement(
        sid=sid,
        actions=["ec2:CreateNetworkInterface"],
        resources=[subnet_arn(i) for i in subnet_ids],
        conditions=_in_vpc(vpc_id),
    )


def cni_statements(
    *, vpc_id: str, cluster_name: str, subnet_ids: Sequence[str]
) -> list[iam.PolicyStatement]:
    """What ``aws-node`` may do in EC2: describe, create interfaces in ``subnet_ids`` and in
    the subnets of ``vpc_id`` tagged ``CNI_SUBNET_TAG=<cluster_name>`` (the GPU subnet, tagged
    by its own stack: :func:`tag_cni_subnet`), and change network interfaces of ``vpc_id`` and
    their attachment to the nodes tagged with ``cluster_name`` only."""
    in_vpc = _in_vpc(vpc_id)
    return [
        iam.PolicyStatement(sid="Describe", actions=list(DESCRIBE_ACTIONS), resources=["*"]),
        # An interface can only be created in a node subnet, with security groups of the VPC;
        # the new interface itself has no VPC to condition on before it exists.
        create_in_subnets(vpc_id=vpc_id, subnet_ids=subnet_ids),
        iam.PolicyStatement(
            sid="CreateInterfaceInTaggedNodeSubnets",
            actions=["ec2:CreateNetworkInterface"],
            resources=[_ec2_arn("subnet/*")],
            conditions={
                **in_vpc,
                "StringEquals": {f"aws:ResourceTag/{CNI_SUBNET_TAG}": cluster_name},
            },
        ),
        iam.PolicyStatement(
            sid="CreateInterfaceWithVpcGroups",
            actions=["ec2:CreateNetworkInterface"],
            resources=[_ec2_arn("security-group/*")],
            conditions=in_vpc,
        ),
        iam.PolicyStatement(
            sid="CreateInterface",
            actions=["ec2:CreateNetworkInterface"],
            resources=[_ec2_arn("network-interface/*")],
        ),
        iam.PolicyStatement(
            sid="TagNewInterface",
            actions=["ec2:CreateTags"],
            resources=[_ec2_arn("network-interface/*")],
            conditions={"StringEquals": {"ec2:CreateAction": "CreateNetworkInterface"}},
        ),
        iam.PolicyStatement(
            sid="ManageInterfacesInVpc",
            actions=[*INTERFACE_ACTIONS, "ec2:CreateTags"],
            resources=[_ec2_arn("network-interface/*")],
            conditions=in_vpc,
        ),
        iam.PolicyStatement(
            sid="AttachToClusterNodes",
            actions=[
                "ec2:AttachNetworkInterface",
                "ec2:DetachNetworkInterface",
                "ec2:ModifyNetworkInterfaceAttribute",
            ],
            resources=[_ec2_arn("instance/*")],
            conditions={"StringEquals": {f"aws:ResourceTag/{NODE_TAG}": cluster_name}},
        ),
        iam.PolicyStatement(
            sid="SecurityGroupsInVpc",
            actions=["ec2:ModifyNetworkInterfaceAttribute"],
            resources=[_ec2_arn("security-group/*")],
            conditions=in_vpc,
        ),
    ]


# The add-on's configuration values (its JSON schema: `aws eks describe-addon-configuration`).
CONFIGURATION_VALUES = {"enableNetworkPolicy": "true"}


def tag_cni_subnet(subnet: ec2.CfnSubnet, cluster_name: str) -> None:
    """Tag ``subnet`` (a node subnet of another stack than the CNI's role) so the CNI's role
    may create network interfaces in it (:data:`CNI_SUBNET_TAG`, valued ``cluster_name``).
    A subnet's tags change in place, so tagging an existing subnet replaces nothing."""
    subnet.tags.set_tag(CNI_SUBNET_TAG, cluster_name)


class VpcCniAddon(Construct):
    """The ``vpc-cni`` add-on at ``addon_version`` with network policies enforced; the primary
    child ``Resource`` is the ``eks.Addon``, ``role`` the CNI's own IAM role.

    Needs the cluster's ``eks-pod-identity-agent`` add-on (which delivers the role's
    credentials to ``aws-node``) but is created beside it, not after it; node groups should
    deploy after both, so nodes join with the managed CNI and are deleted before it on
    ``cdk destroy``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        addon_version: str,
        cluster_name: str,
        node_subnets: Sequence[ec2.ISubnet],
    ) -> None:
        super().__init__(scope, construct_id)
        # With the configured name (a literal) the trust names the cluster's ARN without a
        # reference to it, so the role is created beside the control plane, not after it.
        trusted = cluster_arn(self, cluster_name) if cluster_name else as_icluster(cluster)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=pod_identity_principal(trusted),
            description="VPC CNI (aws-node) through EKS Pod Identity, scoped to this VPC",
        )
        for statement in cni_statements(
            vpc_id=cluster.vpc.vpc_id,
            cluster_name=cluster_name,
            subnet_ids=[s.subnet_id for s in node_subnets],
        ):
            self.role.add_to_principal_policy(statement)
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            "EC2 Describe calls take no resource scope; every write is scoped to this account "
            "and region and conditioned on this VPC (ec2:Vpc) or this cluster's node tag; a "
            "new interface's ARN cannot be known before it exists (it is created only in the "
            "node subnets, named by ARN, or in a subnet of this VPC tagged with this cluster's "
            "name: the GPU subnet, created by another stack).",
            findings=[
                "Resource::*",
                *(
                    f"Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:{r}/*"
                    for r in ("security-group", "network-interface", "instance", "subnet")
                ),
            ],
        )
        self.addon = eks.Addon(
            self,
            "Resource",
            cluster=as_icluster(cluster),
            addon_name="vpc-cni",
            addon_version=addon_version,
            preserve_on_delete=False,
            configuration_values=dict(CONFIGURATION_VALUES),
        )
        cfn = self.addon.node.default_child
        assert isinstance(cfn, eks.CfnAddon)
        # The self-managed aws-node EKS created with the cluster is taken over, not refused.
        cfn.resolve_conflicts = "OVERWRITE"
        cfn.pod_identity_associations = [
            eks.CfnAddon.PodIdentityAssociationProperty(
                role_arn=self.role.role_arn, service_account=CNI_SERVICE_ACCOUNT
            )
        ]
        # Created beside the eks-pod-identity-agent add-on, not after it (about a minute less
        # before the node groups start). Nothing runs either before a node joins, and nodes
        # join only in the stacks after this one, when both are ACTIVE. The association is an
        # EKS API object created with this add-on; EKS injects the credentials' URL into
        # aws-node when the pod is created, and aws-node fetches them from the agent on its
        # node (169.254.170.23) when it starts (EKS User Guide, "Set up the Amazon EKS Pod
        # Identity Agent" and "Use Pod Identities to assign an IAM role to an Amazon EKS
        # add-on"). The agent must exist on the cluster (aws-cdk-lib creates it on first
        # access), which the stack guarantees for every node.
        assert cluster.eks_pod_identity_agent is not None
