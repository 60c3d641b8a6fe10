"""The Amazon VPC CNI as a managed EKS add-on, with NetworkPolicy enforcement on and its own
identity, so the node role no longer carries the CNI's EC2 permissions.

EKS installs the VPC CNI on every new cluster as a self-managed DaemonSet (``aws-node``) that
uses the node role. The managed add-on takes it over (``resolveConflicts: OVERWRITE``), pinned to
``vpcCniAddonVersion``; ``enableNetworkPolicy: "true"`` in its configuration values starts the
network-policy agent (``aws-eks-nodeagent``) beside it, which enforces the NetworkPolicies the
app applies (pd_constructs/network_policy.py). ``aws-node`` gets ``AmazonEKS_CNI_Policy``
through EKS Pod Identity (the add-on's ``podIdentityAssociations``; vpc-cni supports Pod
Identity), from a role only this cluster can use. ``preserveOnDelete`` is off: ``cdk destroy``
removes the add-on with the cluster instead of leaving an unmanaged DaemonSet behind.
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from pd_constructs.eks_types import as_icluster
from pd_constructs.nag import MANAGED_POLICY, acknowledge
from pd_constructs.pod_identity import pod_identity_principal

CNI_POLICY = "AmazonEKS_CNI_Policy"
CNI_SERVICE_ACCOUNT = "aws-node"  # in kube-system
# The add-on's configuration values (its JSON schema: `aws eks describe-addon-configuration`).
CONFIGURATION_VALUES = {"enableNetworkPolicy": "true"}


class VpcCniAddon(Construct):
    """The ``vpc-cni`` add-on at ``addon_version`` with network policies enforced; the primary
    child ``Resource`` is the ``eks.Addon``, ``role`` the CNI's own IAM role.

    Depends on the cluster's ``eks-pod-identity-agent`` add-on (which delivers the role's
    credentials to ``aws-node``); node groups should depend on this construct, so nodes join
    with the managed CNI and are deleted before it on ``cdk destroy``.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, cluster: eks.Cluster, addon_version: str
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=pod_identity_principal(as_icluster(cluster)),
            description="VPC CNI (aws-node) through EKS Pod Identity",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(CNI_POLICY)],
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM4",
            "AmazonEKS_CNI_Policy is the policy EKS documents for the VPC CNI; it moves here "
            "from the node role, so only aws-node holds it.",
            findings=[MANAGED_POLICY + CNI_POLICY],
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
        agent = cluster.eks_pod_identity_agent
        assert agent is not None  # aws-cdk-lib creates it on first access
        self.addon.node.add_dependency(agent)
