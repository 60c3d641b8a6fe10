"""How the VPC CIDR is carved into subnets: one place, read by the VPC construct
(pd_constructs/network/network.py), the GPU subnet's chooser, the NetworkPolicies' ipBlock
peers (pd_constructs/network/network_policy.py) and the connections table
(pd_constructs/inventory/flows.py).

For a /16 (``vpcCidr`` may be /16 to /18; ray_pd_eks/config/rules_cluster.py refuses anything else,
and every block below fits in that range):

=========================  ===========================  ========================================
block                      default                      used by
=========================  ===========================  ========================================
quarters 0-1               10.0.0.0/18, 10.0.64.0/18    private subnets: system nodes and their
                                                        pods, the Lambda functions
start of quarter 2         10.0.128.0/24, 10.0.129.0/24 public subnets: NAT gateway, an
                                                        internet-facing ALB
right after them           10.0.130.0/28, 10.0.130.16/28 the EKS control plane's network
                                                        interfaces only (no node, pod, function
                                                        or load balancer)
right after them           10.0.130.32/27, .64/27       an internal ALB's network interfaces
                                                        only (no node, pod, function or control
                                                        plane), routed to the NAT gateway
quarter 3, one half        10.0.192.0/19 or .224.0/19   the GPU subnet (the other half when it
                                                        moves to another AZ)
=========================  ===========================  ========================================

The control plane's subnets are ``/28`` (16 addresses, 11 usable after AWS's five): EKS needs
at least six free addresses per subnet and recommends 16, for the 2-4 interfaces it keeps and
the new set it creates during a version upgrade before removing the old (Amazon EKS User
Guide, "View Amazon EKS networking requirements for VPC and subnets").

The load balancer's subnets are ``/27`` (32 addresses, 27 usable), in two AZs: an Application
Load Balancer needs subnets in at least two Availability Zones, and AWS asks for subnets of at
least a ``/27`` with at least eight free addresses so that the load balancer can scale (Elastic
Load Balancing, Application Load Balancers Guide, "Subnets for your load balancer"; the
``Subnets`` property of ``AWS::ElasticLoadBalancingV2::LoadBalancer``). Only an internal ALB
uses them: no node group, so no pod, takes an address there, and the NetworkPolicy that admits
the ALB to Serve names these blocks alone (docs/security.md).

``ec2.Vpc`` allocates subnet groups in the order they are configured, each group's subnets in
AZ order, every block aligned to its size: private, public, control plane, load balancer, which
gives exactly the blocks above (tests/test_network.py checks the synthesized CIDRs against this
module). A group added later goes last, so every block before it keeps its CIDR.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

CONTROL_PLANE_PREFIX = 28
LOAD_BALANCER_PREFIX = 27
AZ_COUNT = 2


@dataclass(frozen=True)
class VpcLayout:
    """Every block of one VPC CIDR (strings, as CloudFormation and NetworkPolicies take them)."""

    vpc: str
    private: tuple[str, ...]
    public: tuple[str, ...]
    control_plane: tuple[str, ...]
    load_balancer: tuple[str, ...]
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
    # The next block of the load balancer's size after the control plane's, as ec2.Vpc aligns it.
    size = 2 ** (32 - LOAD_BALANCER_PREFIX)
    after_control = int(control[AZ_COUNT - 1].broadcast_address) + 1
    start = (after_control + size - 1) // size * size
    load_balancer = tuple(
        str(ipaddress.IPv4Network((start + i * size, LOAD_BALANCER_PREFIX)))
        for i in range(AZ_COUNT)
    )
    first, second = (str(h) for h in quarters[3].subnets(prefixlen_diff=1))
    return VpcLayout(
        vpc=str(net),
        private=private,
        public=public,
        control_plane=control_plane,
        load_balancer=load_balancer,
        gpu=(first, second),
    )
