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
from pd_constructs.pod_identity import cluster_arn, pod_identity_principal

CNI_POLICY = "AmazonEKS_CNI_Policy"
CNI_SERVICE_ACCOUNT = "aws-node"  # in kube-system
# The add-on's configuration values (its JSON schema: `aws eks describe-addon-configuration`).
CONFIGURATION_VALUES = {"enableNetworkPolicy": "true"}


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
        cluster_name: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        # With the configured name (a literal) the trust names the cluster's ARN without a
        # reference to it, so the role is created beside the control plane, not after it.
        trusted = cluster_arn(self, cluster_name) if cluster_name else as_icluster(cluster)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=pod_identity_principal(trusted),
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
