"""The deploy proves the application endpoint too: after the readiness check (the model answers
inside the cluster), ONE chat completion through the load balancer, as a client sends it
(handler: ``assets/lambda/endpoint_probe/``; docs/readiness.md, "Through the load balancer").

A function of its own, not a step of the readiness poller: the poller's security group reaches
the API server only (a documented property, docs/flows.md), and its role maps to a Kubernetes
group; this function has no Kubernetes identity at all, and its role may only read the one
Cognito app client's secret (and describe its own stack, to tell a rollback). Its security
group allows HTTPS out to any IPv4 address: Cognito's token endpoint
(``<domain>.auth.<region>.amazoncognito.com``) and regional API (``cognito-idp``) have no
managed prefix list and no published range of their own, and an internet-facing ALB's public
addresses change. The ALB's side admits it narrowly: its security group (internal ALB) or the
NAT gateway's Elastic IP as a /32 (internet-facing ALB, reached through the NAT gateway).

Skipped, with the reason in the output ``ReadinessEndpointProbe``, when the tokens come from an
existing identity provider (``endpointJwtIssuer``): the stack holds no client of it.
"""

from __future__ import annotations

from aws_cdk import CustomResource, Duration, Fn, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr
from constructs import Construct

from pd_constructs.common.lambda_functions import PYTHON_RUNTIME, lambda_code, shared_layer
from pd_constructs.common.nag import (
    LAMBDA_BASIC,
    LAMBDA_VPC,
    acknowledge,
    nag_flatten,
    suppress_provider_framework,
)
from pd_constructs.endpoint.endpoint import ApplicationEndpoint
from pd_constructs.lifecycle.rollback import grant_describe_named_stack
from ray_pd_eks.config import AppConfig
from ray_pd_eks.logs import LogPolicy

HTTPS = 443
# How long 502/503/504 (no healthy target yet) are retried: the TargetGroupBinding registers
# the serve pods and the health check needs two passes 10 s apart before traffic flows.
WAIT_SECONDS = 300
HANDLER_TIMEOUT = Duration.minutes(8)
SKIPPED_EXTERNAL_IDP = (
    "skipped: the tokens come from an existing identity provider (endpointJwtIssuer), and the "
    "stack holds no client credentials of it to get one; call the endpoint with a token of "
    "yours (docs/endpoint.md)"
)
SKIPPED_NO_ENDPOINT = "skipped: endpointExposure=none (no load balancer)"


def probe_skip_reason(config: AppConfig) -> str:
    """Why the deploy sends no chat completion through the load balancer ('' if it does)."""
    if not config.endpoint_exposed:
        return SKIPPED_NO_ENDPOINT
    if config.endpoint_auth == "jwt" and not config.endpoint_uses_cognito:
        return SKIPPED_EXTERNAL_IDP
    return ""


class EndpointProbe(Construct):
    """One chat completion through ``endpoint``'s ALB after ``after`` (the readiness check)
    succeeded; the summary is ``summary``. ``nat_public_ip`` is the NAT gateway's Elastic IP,
    which an internet-facing ALB must admit.

    Like the readiness check's, the machinery (security group, function, Provider, log group)
    is created under ``provider_scope`` (the cluster stack, beside the control plane, off the
    deploy's critical path: docs/deploy-timeline.md); what names the endpoint (the ALB's
    ingress rule, the Cognito read) goes beside the endpoint, in its stack; only the custom
    resource is here."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: AppConfig,
        endpoint: ApplicationEndpoint,
        nat_public_ip: str,
        after: Construct,
        provider_scope: Construct,
        fingerprint: str,
        log_policy: LogPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        alb = endpoint.endpoint
        home = Construct(provider_scope, construct_id)
        beside_endpoint = Construct(endpoint, construct_id)
        self.security_group = ec2.SecurityGroup(
            home,
            "SecurityGroup",
            vpc=cluster.vpc,
            description="Endpoint probe: HTTPS out to the token endpoint and the model ALB",
            allow_all_outbound=False,
        )
        self.security_group.add_egress_rule(
            ec2.Peer.any_ipv4(),
            ec2.Port.tcp(HTTPS),
            "Cognito token endpoint and API (no prefix list), the ALB",
        )
        if config.endpoint_exposure == "internal":
            self.alb_ingress = ec2.CfnSecurityGroupIngress(
                beside_endpoint,
                "AlbFromProbe",
                group_id=alb.security_group.security_group_id,
                source_security_group_id=self.security_group.security_group_id,
                ip_protocol="tcp",
                from_port=HTTPS,
                to_port=HTTPS,
                description="HTTPS from the deploy's endpoint probe",
            )
        else:
            self.alb_ingress = ec2.CfnSecurityGroupIngress(
                beside_endpoint,
                "AlbFromNat",
                group_id=alb.security_group.security_group_id,
                cidr_ip=Fn.join("", [nat_public_ip, "/32"]),
                ip_protocol="tcp",
                from_port=HTTPS,
                to_port=HTTPS,
                description="HTTPS from the NAT gateway (the deploy's endpoint probe)",
            )
            # cdk-nag's EC23 (no ingress from 0.0.0.0/0) cannot read a CIDR made of a
            # reference and fails synthesis ("Rule threw an error during validation").
            acknowledge(
                self.alb_ingress,
                "AwsSolutions-EC23",
                "One address, not the internet: the NAT gateway's Elastic IP as a /32, joined "
                "from the EIP's reference at deploy time, which cdk-nag cannot evaluate.",
            )
        # Kept on delete like the readiness check's: they hold why a failed deploy failed.
        log_group = log_policy.retained().log_group(home, "Logs")
        self.function = lambda_.Function(
            home,
            "Function",
            runtime=PYTHON_RUNTIME,
            code=lambda_code("endpoint_probe"),
            handler="handler.on_event",
            layers=[shared_layer(home)],
            timeout=HANDLER_TIMEOUT,
            description="Endpoint probe: one authenticated chat completion through the ALB",
            vpc=cluster.vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[self.security_group],
            log_group=log_group,
        )
        # DescribeStacks on the stack of the custom resource, to tell its rollback.
        arn = grant_describe_named_stack(self.function, Stack.of(self).stack_name)
        acknowledge(
            self.function,
            "AwsSolutions-IAM5",
            "cloudformation:DescribeStacks on the one stack that holds this function's custom "
            "resource (its ARN ends in an id CloudFormation assigns, hence the trailing *).",
            findings=[f"Resource::{nag_flatten(Stack.of(self.function), arn)}"],
        )
        waits_for: list[Construct] = [after, self.alb_ingress]
        issuer = endpoint.token_issuer
        properties = {
            "LoadBalancerDns": alb.load_balancer.load_balancer_dns_name,
            "Host": config.endpoint_domain_name,
            "ModelId": config.model_id,
            "WaitSeconds": str(WAIT_SECONDS),
            "Fingerprint": fingerprint,
        }
        if issuer is not None:
            # DescribeUserPoolClient's only resource type is the user pool (Service
            # Authorization Reference, Amazon Cognito User Pools); the pool holds one client.
            # In the endpoint's stack, beside the pool, attached to the function's role.
            role = self.function.role
            assert role is not None
            self.cognito_policy = iam.Policy(
                beside_endpoint,
                "ReadClientSecret",
                statements=[
                    iam.PolicyStatement(
                        actions=["cognito-idp:DescribeUserPoolClient"],
                        resources=[issuer.user_pool.user_pool_arn],
                    )
                ],
                roles=[role],
            )
            waits_for.append(self.cognito_policy)
            properties |= {
                "TokenUrl": issuer.token_url,
                "UserPoolId": issuer.user_pool.user_pool_id,
                "ClientId": issuer.client.user_pool_client_id,
                "Scope": issuer.scope,
            }
        acknowledge(
            self.function,
            "AwsSolutions-IAM4",
            "AWSLambdaBasicExecutionRole and AWSLambdaVPCAccessExecutionRole only let the "
            "function write its own logs and attach to the VPC.",
            findings=[LAMBDA_BASIC, LAMBDA_VPC],
        )
        provider = cr.Provider(
            home, "Provider", on_event_handler=self.function, log_group=log_group
        )
        suppress_provider_framework(provider, self.function)
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=provider.service_token,
            resource_type="Custom::EndpointProbe",
            properties=properties,
        )
        self.resource.node.add_dependency(*waits_for)
        self.summary = self.resource.get_att_string("EndpointProbe")
