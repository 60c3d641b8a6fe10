"""The application endpoint: an HTTPS Application Load Balancer owned by the stack, in front of
the Ray serve service, with JWT validation at the load balancer.

What gets created (only when ``endpointExposure`` is not ``none``):

- :class:`LoadBalancerController`: the AWS Load Balancer Controller (official chart, pinned) on
  an EKS Pod Identity role allowed only what TargetGroupBinding reconciliation calls. It creates
  no load balancer here (it may not): it only keeps the target group's targets equal to the
  serve service's ready endpoints.
- :class:`TokenIssuer` (unless an existing identity provider is configured): a Cognito user pool
  with a resource server (scope ``<rayServiceName>/invoke``), one machine-to-machine app client
  (client-credentials grant, generated secret) and a domain for the token endpoint.
- :class:`ModelEndpoint`: the ALB (internal or internet-facing), its security group (443 from
  ``endpointAllowedCidrs`` only), an IP target group on 8000 with Ray Serve's proxy health check,
  the HTTPS listener (``jwt-validation`` then forward), the rule that lets the ALB reach port
  8000 on the cluster security group, and the ``TargetGroupBinding``.

CloudFormation owns every piece, so ``cdk destroy`` removes them; the binding goes before the
controller (its finalizer needs the controller to deregister the targets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Annotations, Aws, CfnRule, CfnRuleAssertion, Duration, Fn, RemovalPolicy
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from pd_constructs.common.eks_types import as_icluster
from pd_constructs.common.helm import (
    LOAD_BALANCER_CONTROLLER,
    HelmAddon,
)
from pd_constructs.common.nag import acknowledge
from pd_constructs.common.pod_identity import pod_identity_service_account
from pd_constructs.common.templates import render
from pd_constructs.network.network import LOAD_BALANCER_SUBNET_GROUP
from ray_pd_eks.config import AppConfig, set_hint
from ray_pd_eks.logs import log_removal_policy

SERVE_PORT = 8000
# Ray Serve's HTTP proxy answers this path itself (200 when it has its route table and is not
# draining, 503 otherwise): ray/serve/_private/proxy_request_response.py, ASGIProxyRequest.
# is_health_request, and proxy.py's _get_health_or_routes_reponse, in Ray 2.58.
HEALTH_CHECK_PATH = "/-/healthz"
CONTROLLER_SERVICE_ACCOUNT = "aws-load-balancer-controller"
# The controller version whose source CONTROLLER_CALLS was read from; a test holds it equal to
# the chart's app version, so a chart bump means reading the calls again.
CONTROLLER_CALLS_READ_AT = "v3.5.0"


def serve_service(config: AppConfig) -> str:
    return f"{config.ray_service_name}-serve-svc"


@dataclass(frozen=True)
class ControllerCall:
    """One AWS API call the controller makes for a TargetGroupBinding, and where (controller
    source at the pinned app version, kubernetes-sigs/aws-load-balancer-controller)."""

    action: str
    target_group_only: bool  # False: the action has no resource-level permissions
    source: str


# Everything the controller calls to keep one IP TargetGroupBinding without a `networking`
# block in step (kubernetes-sigs/aws-load-balancer-controller v3.5.0, commit 11eb202c9):
# the TargetGroupBinding reconciler (controllers/elbv2/targetgroupbinding_controller.go) ->
# resource manager (pkg/targetgroupbinding/resource_manager.go) -> targets manager
# (targets_manager.go) and networking manager (pkg/networking/networking_manager.go), plus the
# binding's admission webhooks (webhooks/elbv2/). The region and VPC id are flags, so startup
# calls nothing (pkg/aws/cloud.go skips the metadata and DescribeInstances lookups).
CONTROLLER_CALLS: tuple[ControllerCall, ...] = (
    ControllerCall(
        "elasticloadbalancing:DescribeTargetGroups",
        False,
        "webhooks/elbv2/targetgroup_helper.go: the binding's mutator and validator read the "
        "target group's type, VPC, IP address type and protocol",
    ),
    ControllerCall(
        "elasticloadbalancing:DescribeTargetHealth",
        False,
        "pkg/targetgroupbinding/targets_manager.go ListTargets: the current targets and health",
    ),
    ControllerCall(
        "elasticloadbalancing:RegisterTargets",
        True,
        "pkg/targetgroupbinding/targets_manager.go RegisterTargets: new ready pod IPs",
    ),
    ControllerCall(
        "elasticloadbalancing:DeregisterTargets",
        True,
        "pkg/targetgroupbinding/targets_manager.go DeregisterTargets: pods gone or unready",
    ),
    ControllerCall(
        "ec2:DescribeVpcs",
        False,
        "pkg/networking/vpc_info_provider.go FetchVPCInfo, from resource_manager.go "
        "generateOverrideAzFn before each registration (pod IP inside the VPC's CIDRs?)",
    ),
    ControllerCall(
        "ec2:DescribeSecurityGroups",
        False,
        "pkg/networking/networking_manager.go fetchEndpointSGsFromAWS and "
        "security_group_reconciler.go ReconcileIngress: the binding's networking garbage "
        "collection reads the cluster-tagged groups; it revokes only rules labelled "
        "elbv2.k8s.aws/targetGroupBinding=shared, which exist only for bindings with a "
        "networking block (ours has none), so it needs no Authorize/RevokeSecurityGroupIngress",
    ),
)


def controller_policy_statements(target_group_arn: str) -> list[iam.PolicyStatement]:
    """The controller's policy: the reads it makes on ``*`` (none of them has resource-level
    permissions in the Service Authorization Reference), and target (de)registration on the one
    stack-owned target group."""
    reads = [c.action for c in CONTROLLER_CALLS if not c.target_group_only]
    writes = [c.action for c in CONTROLLER_CALLS if c.target_group_only]
    return [
        iam.PolicyStatement(
            sid="ReadTargetGroupsVpcAndSecurityGroups", actions=reads, resources=["*"]
        ),
        iam.PolicyStatement(
            sid="KeepTheServeTargets", actions=writes, resources=[target_group_arn]
        ),
    ]


def controller_values(config: AppConfig, *, region: str, vpc_id: str) -> dict[str, Any]:
    """The chart's values: the file's, plus what depends on the deployment."""
    return LOAD_BALANCER_CONTROLLER.values(
        {
            "clusterName": config.cluster_name,
            "region": region,
            "vpcId": vpc_id,
            "watchNamespace": config.namespace,
            "serviceAccount": {"name": CONTROLLER_SERVICE_ACCOUNT},
        }
    )


def render_target_group_binding(
    config: AppConfig, *, target_group_arn: str, vpc_id: str
) -> dict[str, Any]:
    """The TargetGroupBinding; the ARN and VPC id may be CloudFormation tokens."""
    return dict(
        render(
            "manifests/target-group-binding.yaml",
            {
                "NAME": f"{config.ray_service_name}-serve",
                "NAMESPACE": config.namespace,
                "SERVICE": serve_service(config),
                "TARGET_GROUP_ARN": target_group_arn,
                "VPC_ID": vpc_id,
            },
        )
    )


class LoadBalancerController(Construct):
    """The AWS Load Balancer Controller in ``kube-system``: service account with an EKS Pod
    Identity role (created first) whose policy allows only what TargetGroupBinding
    reconciliation calls (:data:`CONTROLLER_CALLS`), target changes on ``target_group_arn``
    only; then the pinned chart with its Service and Gateway controllers and its WAF/Shield
    add-ons off, installed with ``--wait`` so its admission webhook serves before any
    TargetGroupBinding is applied."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: AppConfig,
        region: str,
        target_group_arn: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.service_account = pod_identity_service_account(
            self,
            cluster=cluster,
            name=CONTROLLER_SERVICE_ACCOUNT,
            namespace=LOAD_BALANCER_CONTROLLER.namespace,
        )
        self.policy = iam.Policy(
            self,
            "Policy",
            statements=controller_policy_statements(target_group_arn),
        )
        self.service_account.role.attach_inline_policy(self.policy)
        acknowledge(
            self.policy,
            "AwsSolutions-IAM5",
            "Only the read calls of TargetGroupBinding reconciliation are on * "
            "(elasticloadbalancing:DescribeTargetGroups/DescribeTargetHealth, "
            "ec2:DescribeVpcs/DescribeSecurityGroups: none has resource-level permissions); "
            "RegisterTargets/DeregisterTargets are limited to the stack's one target group, and "
            "nothing else may change (no load balancer, listener, rule or security group).",
            findings=["Resource::*"],
        )
        self.chart = HelmAddon(
            self,
            "Chart",
            cluster=cluster,
            release=LOAD_BALANCER_CONTROLLER,
            overrides=controller_values(config, region=region, vpc_id=cluster.vpc.vpc_id),
        )
        # Pod Identity injects credentials when a pod starts: the association comes first,
        # and the policy too, so the first reconcile is not refused.
        self.chart.node.add_dependency(self.service_account)
        self.chart.node.add_dependency(self.policy)


class TokenIssuer(Construct):
    """A Cognito user pool that issues access tokens to machines only.

    No user signs up or in: self sign-up is off and the one app client allows only the OAuth 2.0
    client-credentials grant, with a generated secret, for the scope ``<identifier>/invoke``.
    Access tokens last one hour. The pool is deleted with the stack (it holds no users).
    """

    def __init__(self, scope: Construct, construct_id: str, *, resource_server_id: str) -> None:
        super().__init__(scope, construct_id)
        self.user_pool = cognito.UserPool(
            self,
            "UserPool",
            self_sign_up_enabled=False,
            account_recovery=cognito.AccountRecovery.NONE,
            feature_plan=cognito.FeaturePlan.ESSENTIALS,
            deletion_protection=False,
            removal_policy=RemovalPolicy.DESTROY,
        )
        scope_name = "invoke"
        self.resource_server = self.user_pool.add_resource_server(
            "ResourceServer",
            identifier=resource_server_id,
            scopes=[
                cognito.ResourceServerScope(
                    scope_name=scope_name, scope_description="Call the model endpoint"
                )
            ],
        )
        self.scope = f"{resource_server_id}/{scope_name}"
        self.client = self.user_pool.add_client(
            "Client",
            generate_secret=True,
            auth_flows=cognito.AuthFlow(),
            o_auth=cognito.OAuthSettings(
                flows=cognito.OAuthFlows(client_credentials=True),
                scopes=[
                    cognito.OAuthScope.resource_server(
                        self.resource_server,
                        cognito.ResourceServerScope(
                            scope_name=scope_name, scope_description="Call the model endpoint"
                        ),
                    )
                ],
            ),
            access_token_validity=Duration.hours(1),
            enable_token_revocation=True,
            prevent_user_existence_errors=True,
        )
        # Domain prefixes are global per region; the stack id's first UUID block makes this one
        # unique without a lookup (and without putting the account id in a public name).
        suffix = Fn.select(0, Fn.split("-", Fn.select(2, Fn.split("/", Aws.STACK_ID))))
        self.domain = self.user_pool.add_domain(
            "Domain",
            cognito_domain=cognito.CognitoDomainOptions(
                domain_prefix=Fn.join("-", ["ray-pd-eks", suffix])
            ),
        )
        self.issuer = self.user_pool.user_pool_provider_url
        self.jwks_uri = f"{self.issuer}/.well-known/jwks.json"
        self.token_url = f"{self.domain.base_url()}/oauth2/token"
        reason_no_users = (
            "Machine-to-machine pool: self sign-up is off and the only app client allows just "
            "the client-credentials grant, so no person ever has a password or signs in here"
        )
        acknowledge(self.user_pool, "AwsSolutions-COG1", f"{reason_no_users}.")
        acknowledge(self.user_pool, "AwsSolutions-COG2", f"{reason_no_users}; MFA has no user.")
        acknowledge(
            self.user_pool,
            "AwsSolutions-COG3",
            f"{reason_no_users}; threat protection evaluates user sign-ins, of which there are "
            "none (and needs the Plus plan).",
        )
        acknowledge(
            self.user_pool,
            "AwsSolutions-COG8",
            f"{reason_no_users}; the Plus plan adds threat protection for user sign-ins only.",
        )


class AccessLogBucket(Construct):
    """Where the ALB writes its access logs (one line per request: client, status, latency,
    bytes). SSE-S3, because ALB log delivery supports no KMS key; TLS only; no public access;
    objects expire after ``logRetentionDays``. Emptied and deleted with the stack unless
    ``retainLogs`` keeps it, like the log groups."""

    def __init__(self, scope: Construct, construct_id: str, *, config: AppConfig) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Resource",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireAccessLogs", expiration=Duration.days(config.log_retention_days)
                )
            ],
            removal_policy=log_removal_policy(config),
            auto_delete_objects=not config.retain_logs,
        )
        acknowledge(
            self.bucket,
            "AwsSolutions-S1",
            "This bucket holds the load balancer's access logs; logging access to a log "
            "bucket into another bucket would only move the question one bucket further.",
        )


class RateLimit(Construct):
    """An AWS WAF web ACL on the load balancer with one rate-based rule: a client IP that sends
    more than ``limit_per_5min`` requests within the last 5 minutes is blocked (403) until its
    rate falls below the limit again; everything else passes on to the listener's JWT check.
    It protects the GPUs from one client's flood (tokens cost nothing to ask for once a client
    has a credential) and costs a web ACL, one rule and per-request charges (README)."""

    RULE_NAME = "RateLimitPerClientIp"

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        load_balancer: elbv2.ApplicationLoadBalancer,
        limit_per_5min: int,
    ) -> None:
        super().__init__(scope, construct_id)
        metric = Fn.join("-", [Aws.STACK_NAME, "endpoint"])
        self.web_acl = wafv2.CfnWebACL(
            self,
            "Resource",
            scope="REGIONAL",
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            description="Rate limit per client IP in front of the model endpoint",
            rules=[
                wafv2.CfnWebACL.RuleProperty(
                    name=self.RULE_NAME,
                    priority=0,
                    action=wafv2.CfnWebACL.RuleActionProperty(block={}),
                    statement=wafv2.CfnWebACL.StatementProperty(
                        rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(
                            aggregate_key_type="IP",
                            limit=limit_per_5min,
                            evaluation_window_sec=300,
                        )
                    ),
                    visibility_config=wafv2.CfnWebACL.VisibilityConfigProperty(
                        cloud_watch_metrics_enabled=True,
                        metric_name=Fn.join("-", [Aws.STACK_NAME, self.RULE_NAME]),
                        sampled_requests_enabled=True,
                    ),
                )
            ],
            visibility_config=wafv2.CfnWebACL.VisibilityConfigProperty(
                cloud_watch_metrics_enabled=True,
                metric_name=metric,
                sampled_requests_enabled=True,
            ),
        )
        self.association = wafv2.CfnWebACLAssociation(
            self,
            "Association",
            resource_arn=load_balancer.load_balancer_arn,
            web_acl_arn=self.web_acl.attr_arn,
        )


class ModelEndpoint(Construct):
    """The ALB, its target group and listener, the security-group rules, and the binding.

    ``issuer``/``jwks_uri``/``claims``: the JWT check of the listener; ``None`` issuer means no
    authentication (allowed by the config only for an internal load balancer).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: AppConfig,
        issuer: str | None,
        jwks_uri: str | None,
        claims: list[dict[str, Any]],
    ) -> None:
        super().__init__(scope, construct_id)
        vpc = cluster.vpc
        internet_facing = config.endpoint_exposure == "internet-facing"
        # Internal: subnets of the ALB's own, which no node (so no pod) uses, so the
        # NetworkPolicy's ALB peers admit the ALB alone (pd_constructs/network/network.py).
        self.subnets = (
            vpc.public_subnets
            if internet_facing
            else vpc.select_subnets(subnet_group_name=LOAD_BALANCER_SUBNET_GROUP).subnets
        )
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"{config.endpoint_exposure} ALB of the model endpoint: HTTPS in from "
            "the allowed CIDRs, port 8000 out to the Ray serve pods",
            allow_all_outbound=False,
        )
        for cidr in config.endpoint_allowed_cidrs:
            self.security_group.add_ingress_rule(
                ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), f"HTTPS from {cidr} (endpointAllowedCidrs)"
            )
        if any(c.endswith("/0") for c in config.endpoint_allowed_cidrs):
            acknowledge(
                self.security_group,
                "AwsSolutions-EC23",
                "endpointAllowedCidrs opens the internet-facing endpoint to everyone on purpose "
                "(the config allows it only with endpointAuth=jwt): the listener rejects every "
                "request without a valid token before it reaches the model.",
            )
        cluster_sg = cluster.cluster_security_group_id
        self.security_group.add_egress_rule(
            ec2.Peer.security_group_id(cluster_sg),
            ec2.Port.tcp(SERVE_PORT),
            "To the Ray serve pods (cluster security group)",
        )
        if issuer and jwks_uri:
            # jwt-validation: the ALB fetches the issuer's signing keys from ``JwksEndpoint``
            # itself; without this rule it cannot, and every request fails while the deploy
            # succeeds. aws-cdk-lib adds the same rule for the OIDC and Cognito actions
            # ("Allow to IdP endpoint", application-listener-action.js in 2.275) but not for
            # authenticate_jwt. It cannot be narrower than any IPv4 address: a security group
            # matches addresses, not names; Cognito's regional endpoint
            # (cognito-idp.<region>.amazonaws.com) has no managed prefix list and no published
            # range of its own, and an external issuer's addresses are its own. What narrows it
            # is the ALB itself: it connects only to the one JWKS URL of the listener
            # (docs/endpoint.md, "Outbound from the load balancer").
            self.security_group.add_egress_rule(
                ec2.Peer.any_ipv4(),
                ec2.Port.tcp(443),
                "JWKS of the token issuer (jwt-validation fetches the signing keys)",
            )
        # Pods take their node's security groups (VPC CNI), and every node carries the cluster
        # security group: one rule there lets the ALB, and nothing else outside the cluster,
        # reach the serve port. It is a resource of this stack, so destroy removes it.
        self.serve_ingress = ec2.CfnSecurityGroupIngress(
            self,
            "ServePortFromLoadBalancer",
            group_id=cluster_sg,
            source_security_group_id=self.security_group.security_group_id,
            ip_protocol="tcp",
            from_port=SERVE_PORT,
            to_port=SERVE_PORT,
            description="Ray serve port 8000 from the model endpoint's ALB only",
        )
        self.load_balancer = elbv2.ApplicationLoadBalancer(
            self,
            "LoadBalancer",
            vpc=vpc,
            internet_facing=internet_facing,
            vpc_subnets=ec2.SubnetSelection(subnets=self.subnets),
            security_group=self.security_group,
            idle_timeout=Duration.seconds(config.endpoint_idle_timeout_seconds),
            drop_invalid_header_fields=True,
            deletion_protection=False,  # cdk destroy removes it
            http2_enabled=True,
        )
        self.web_acl: RateLimit | None = None
        if internet_facing and config.endpoint_rate_limit_per5_min:
            self.web_acl = RateLimit(
                self,
                "RateLimit",
                load_balancer=self.load_balancer,
                limit_per_5min=config.endpoint_rate_limit_per5_min,
            )
        # The bucket policy must name ELB's log-delivery principal of the region (an account
        # in older regions, a service principal in newer ones): aws-cdk-lib picks it when the
        # region is known at synth, and refuses otherwise.
        self.access_logs: AccessLogBucket | None = None
        if config.region:
            self.access_logs = AccessLogBucket(self, "AccessLogs", config=config)
            self.load_balancer.log_access_logs(self.access_logs.bucket, prefix="alb")
        else:
            acknowledge(
                self.load_balancer,
                "AwsSolutions-ELB2",
                "Environment-agnostic stack (region empty): the log bucket's policy must name "
                "the region's ELB log-delivery principal, which needs the region at synth; "
                f"set the region ({set_hint('region')}) to get access logs (synth warns). Ray "
                "Serve's proxy still "
                "logs every request in the pods.",
            )
        self.target_group = elbv2.ApplicationTargetGroup(
            self,
            "TargetGroup",
            vpc=vpc,
            port=SERVE_PORT,
            protocol=elbv2.ApplicationProtocol.HTTP,
            target_type=elbv2.TargetType.IP,
            health_check=elbv2.HealthCheck(
                path=HEALTH_CHECK_PATH,
                healthy_http_codes="200",
                interval=Duration.seconds(10),
                timeout=Duration.seconds(5),
                healthy_threshold_count=2,
                unhealthy_threshold_count=3,
            ),
        )
        forward = elbv2.ListenerAction.forward([self.target_group])
        action = (
            elbv2.ListenerAction.authenticate_jwt(
                issuer=issuer, jwks_endpoint=jwks_uri, next=forward
            )
            if issuer and jwks_uri
            else forward
        )
        self.listener = self.load_balancer.add_listener(
            "Https",
            port=443,
            protocol=elbv2.ApplicationProtocol.HTTPS,
            certificates=[elbv2.ListenerCertificate.from_arn(config.endpoint_certificate_arn)],
            ssl_policy=elbv2.SslPolicy.RECOMMENDED_TLS,
            open=False,  # ingress comes only from endpointAllowedCidrs, added above
            default_action=action,
        )
        if issuer and claims:
            # aws-cdk-lib 2.275's authenticateJwt() has no additional claims; CloudFormation's
            # JwtValidationConfig does (AdditionalClaims: Format, Name, Values).
            cfn_listener = self.listener.node.default_child
            assert isinstance(cfn_listener, elbv2.CfnListener)
            cfn_listener.add_property_override(
                "DefaultActions.0.JwtValidationConfig.AdditionalClaims", claims
            )
        if not config.region:
            # The config checks the certificate's region at synth when `region` is set; an
            # environment-agnostic stack checks it before CloudFormation creates anything.
            cert_region = config.endpoint_certificate_arn.split(":")[3]
            CfnRule(
                self,
                "CertificateInDeployRegion",
                assertions=[
                    CfnRuleAssertion(
                        assert_=Fn.condition_equals(Aws.REGION, cert_region),
                        assert_description=(
                            f"endpointCertificateArn is a certificate of {cert_region}: an ALB "
                            "uses certificates of its own region; deploy there or use one of "
                            "this region"
                        ),
                    )
                ],
            )
        self.binding = eks.KubernetesManifest(
            self,
            "TargetGroupBinding",
            cluster=as_icluster(cluster),
            manifest=[
                render_target_group_binding(
                    config,
                    target_group_arn=self.target_group.target_group_arn,
                    vpc_id=vpc.vpc_id,
                )
            ],
            # The elbv2.k8s.aws CRD arrives with the controller chart in the same deploy.
            skip_validation=True,
        )
        self.host = config.endpoint_domain_name or self.load_balancer.load_balancer_dns_name
        for warning_id, text in endpoint_warnings(config):
            Annotations.of(self).add_warning_v2(warning_id, text)


def endpoint_warnings(config: AppConfig) -> list[tuple[str, str]]:
    """Synth warnings (id, text) for settings that deploy but deserve a second look."""
    warnings = []
    if not config.endpoint_domain_name:
        warnings.append(
            (
                "ray-pd-eks:noEndpointDomain",
                "endpointDomainName is empty: the outputs use the ALB's DNS name, which the "
                "certificate does not cover, so TLS clients will reject it. Point a DNS record "
                "(CNAME or alias) of the certificate's name at the EndpointLoadBalancerDns "
                f"output and set {set_hint('endpointDomainName', '<that name>')}.",
            )
        )
    if not config.region:
        warnings.append(
            (
                "ray-pd-eks:noEndpointAccessLogs",
                "region is empty: the endpoint's ALB writes no access logs (their bucket "
                "policy needs the region's log-delivery principal at synth); set "
                f"{set_hint('region', '<deploy region>')} to get them.",
            )
        )
    if config.endpoint_auth == "none":
        warnings.append(
            (
                "ray-pd-eks:endpointWithoutAuth",
                "endpointAuth=none: anyone who can reach the internal load balancer from "
                f"{', '.join(config.endpoint_allowed_cidrs)} can call the model; use "
                "endpointAuth=jwt unless every client there is trusted.",
            )
        )
    return warnings


def jwt_claims(config: AppConfig) -> list[dict[str, Any]]:
    """The claims the listener checks besides signature, ``iss`` and ``exp``.

    Cognito access tokens carry ``scope`` (space-separated) and ``token_use: access``, not
    ``aud``; an existing identity provider is checked on the audience and/or scope configured,
    ``aud`` in the format its tokens carry it (``endpointJwtAudienceFormat``: one string, or an
    array as RFC 7519 allows).
    """
    claims: list[dict[str, Any]] = []
    if config.endpoint_scope:
        claims.append(
            {"Format": "space-separated-values", "Name": "scope", "Values": [config.endpoint_scope]}
        )
    if config.endpoint_uses_cognito:
        claims.append({"Format": "single-string", "Name": "token_use", "Values": ["access"]})
    if config.endpoint_jwt_audience:
        claims.append(
            {
                "Format": config.endpoint_jwt_audience_format,
                "Name": "aud",
                "Values": [config.endpoint_jwt_audience],
            }
        )
    return claims


class ApplicationEndpoint(Construct):
    """Everything above for one deployment: the controller, the token issuer (unless an
    existing identity provider or no authentication is configured) and the endpoint, with the
    binding ordered after the controller and the RayService."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: AppConfig,
        region: str,
        rayservice: Construct,
    ) -> None:
        super().__init__(scope, construct_id)
        self.token_issuer: TokenIssuer | None = None
        issuer: str | None = None
        jwks_uri: str | None = None
        if config.endpoint_uses_cognito:
            self.token_issuer = TokenIssuer(
                self, "TokenIssuer", resource_server_id=config.ray_service_name
            )
            issuer, jwks_uri = self.token_issuer.issuer, self.token_issuer.jwks_uri
        elif config.endpoint_auth == "jwt":
            issuer, jwks_uri = config.endpoint_jwt_issuer, config.endpoint_jwks_uri
        self.issuer = issuer
        self.endpoint = ModelEndpoint(
            self,
            "Endpoint",
            cluster=cluster,
            config=config,
            issuer=issuer,
            jwks_uri=jwks_uri,
            claims=jwt_claims(config),
        )
        self.controller = LoadBalancerController(
            self,
            "Controller",
            cluster=cluster,
            config=config,
            region=region,
            target_group_arn=self.endpoint.target_group.target_group_arn,
        )
        # Apply: controller (its webhook validates the binding) and the RayService first.
        # Destroy, in reverse: the binding's finalizer needs the controller to deregister.
        self.endpoint.binding.node.add_dependency(self.controller.chart)
        self.endpoint.binding.node.add_dependency(rayservice)
