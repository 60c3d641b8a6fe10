"""How the VPC CIDR is carved into subnets: one place, read by the VPC construct
(pd_constructs/network.py), the GPU subnet's chooser, the NetworkPolicies' ipBlock peers
(pd_constructs/network_policy.py) and the connections table (pd_constructs/flows.py).

For a /16 (``vpcCidr`` may be /16 to /18; ray_pd_eks/config.py refuses anything else, and every
block below fits in that range):

=========================  ===========================  ========================================
block                      default                      used by
=========================  ===========================  ========================================
quarters 0-1               10.0.0.0/18, 10.0.64.0/18    private subnets: system nodes and their
                                                        pods, the Lambda functions, an internal
                                                        ALB
start of quarter 2         10.0.128.0/24, 10.0.129.0/24 public subnets: NAT gateway, an
                                                        internet-facing ALB
right after them           10.0.130.0/28, 10.0.130.16/28 the EKS control plane's network
                                                        interfaces only (no node, pod, function
                                                        or load balancer)
quarter 3, one half        10.0.192.0/19 or .224.0/19   the GPU subnet (the other half when it
                                                        moves to another AZ)
=========================  ===========================  ========================================

The control plane's subnets are ``/28`` (16 addresses, 11 usable after AWS's five): EKS needs
at least six free addresses per subnet and recommends 16, for the 2-4 interfaces it keeps and
the new set it creates during a version upgrade before removing the old (Amazon EKS User
Guide, "View Amazon EKS networking requirements for VPC and subnets"). ``ec2.Vpc`` allocates
subnet groups in the order they are configured, each group's subnets in AZ order, every block
aligned to its size: private, public, control plane, which gives exactly the blocks above
(tests/test_network.py checks the synthesized CIDRs against this module).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

CONTROL_PLANE_PREFIX = 28
AZ_COUNT = 2


@dataclass(frozen=True)
class VpcLayout:
    """Every block of one VPC CIDR (strings, as CloudFormation and NetworkPolicies take them)."""

    vpc: str
    private: tuple[str, ...]
    public: tuple[str, ...]
    control_plane: tuple[str, ...]
    gpu: tuple[str, str]

    @property
    def private_mask(self) -> int:
        return ipaddress.IPv4Network(self.private[0]).prefixlen

    @property
    def public_mask(self) -> int:
        return ipaddress.IPv4Network(self.public[0]).prefixlen

    @property
    def node_blocks(self) -> tuple[str, ...]:
        """Every block a node (and so a pod) can take an address from."""
        return (*self.private, *self.gpu)


def vpc_layout(vpc_cidr: str) -> VpcLayout:
    """The blocks of ``vpc_cidr`` (a /16 to /18), as the module docstring lays them out."""
    net = ipaddress.IPv4Network(vpc_cidr)
    if not 16 <= net.prefixlen <= 18:
        raise ValueError(f"vpcCidr {vpc_cidr}: the layout needs a /16 to /18")
    quarters = list(net.subnets(prefixlen_diff=2))
    private = tuple(str(q) for q in quarters[:AZ_COUNT])
    public_blocks = list(quarters[2].subnets(new_prefix=net.prefixlen + 8))
    public = tuple(str(b) for b in public_blocks[:AZ_COUNT])
    control = list(public_blocks[AZ_COUNT].subnets(new_prefix=CONTROL_PLANE_PREFIX))
    control_plane = tuple(str(b) for b in control[:AZ_COUNT])
    first, second = (str(h) for h in quarters[3].subnets(prefixlen_diff=1))
    return VpcLayout(
        vpc=str(net),
        private=private,
        public=public,
        control_plane=control_plane,
        gpu=(first, second),
    )
