"""The application endpoint as synthesized: an internal ALB with the stack's Cognito pool
(variant_app), an internet-facing one with an existing identity provider (token_app), and none
at all by default."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsonschema
import pytest
import yaml

from pd_constructs.common.helm import LOAD_BALANCER_CONTROLLER, LOAD_BALANCER_CONTROLLER_APP_VERSION
from pd_constructs.endpoint.endpoint import (
    CONTROLLER_CALLS,
    CONTROLLER_CALLS_READ_AT,
    AccessLogBucket,
    endpoint_warnings,
    jwt_claims,
    render_target_group_binding,
)
from ray_pd_eks.config import DEFAULTS
from tests.conftest import CERTIFICATE, IDP_ISSUER, IDP_JWKS
from tests.synth import Synthesized, resolve

SCHEMAS = Path(__file__).resolve().parent / "schemas"
CRD_FILE = (
    SCHEMAS / f"elbv2.k8s.aws_targetgroupbindings-{LOAD_BALANCER_CONTROLLER_APP_VERSION}.yaml"
)
ENDPOINT_TYPES = (
    "AWS::ElasticLoadBalancingV2::LoadBalancer",
    "AWS::ElasticLoadBalancingV2::Listener",
    "AWS::ElasticLoadBalancingV2::TargetGroup",
    "AWS::Cognito::UserPool",
    "AWS::Cognito::UserPoolClient",
    "AWS::EKS::PodIdentityAssociation",
)


def _one(app: Synthesized, rtype: str, prefix: str = "ApplicationEndpoint") -> tuple[str, Any]:
    found = [(k, v) for k, v in app.resources("Workload", rtype).items() if k.startswith(prefix)]
    assert len(found) == 1, found
    return found[0]


def _kubernetes(app: Synthesized, prefix: str) -> tuple[str, dict[str, Any]]:
    return _one(app, "Custom::AWSCDK-EKS-KubernetesResource", prefix)


def _chart(app: Synthesized) -> tuple[str, dict[str, Any]]:
    return _one(app, "Custom::AWSCDK-EKS-HelmChart", "ApplicationEndpointControllerChart")


@functools.cache
def _tgb_schema() -> dict[str, Any]:
    """The v1beta1 schema, closed like the API server's pruning (unknown fields rejected)."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    (v1beta1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    assert v1beta1["served"] and v1beta1["storage"]

    def close(schema: Any) -> Any:
        if isinstance(schema, dict):
            schema = {k: close(v) for k, v in schema.items()}
            if "properties" in schema and "additionalProperties" not in schema:
                schema["additionalProperties"] = False
            return schema
        if isinstance(schema, list):
            return [close(s) for s in schema]
        return schema

    return dict(close(v1beta1["schema"]["openAPIV3Schema"]))


# -- default: nothing ----------------------------------------------------------------------


def test_default_synth_creates_no_load_balancer(default_app: Synthesized) -> None:
    for stack, template in default_app.templates.items():
        types = {r["Type"] for r in template["Resources"].values()}
        assert not types & set(ENDPOINT_TYPES), stack
        assert not [k for k in template.get("Outputs", {}) if k.startswith("Endpoint")], stack
    charts = default_app.resources("Workload", "Custom::AWSCDK-EKS-HelmChart").values()
    assert [c["Properties"]["Release"] for c in charts] == ["kuberay-operator"]


# -- the load balancer, listener and target group ------------------------------------------


def test_internal_alb_in_subnets_of_its_own(variant_app: Synthesized) -> None:
    """Not the cluster's private subnets, which the system nodes share (tests/test_network.py
    checks that no node group, control plane or function uses these)."""
    _, lb = _one(variant_app, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    props = lb["Properties"]
    assert props["Scheme"] == "internal"
    assert props["Type"] == "application"
    subnets = [resolve(s) for s in props["Subnets"]]
    assert len(subnets) == 2 and all("VpcLoadBalancerSubnet" in s for s in subnets), subnets
    attributes = {a["Key"]: a["Value"] for a in props["LoadBalancerAttributes"]}
    assert attributes["idle_timeout.timeout_seconds"] == "600"
    assert attributes["deletion_protection.enabled"] == "false"
    assert attributes["routing.http.drop_invalid_header_fields.enabled"] == "true"


def test_internet_facing_alb_in_the_public_subnets(token_app: Synthesized) -> None:
    _, lb = _one(token_app, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    props = lb["Properties"]
    assert props["Scheme"] == "internet-facing"
    subnets = [resolve(s) for s in props["Subnets"]]
    assert len(subnets) == 2 and all("VpcPublicSubnet" in s for s in subnets), subnets
    attributes = {a["Key"]: a["Value"] for a in props["LoadBalancerAttributes"]}
    assert attributes["idle_timeout.timeout_seconds"] == "4000"


def test_only_https_443_with_the_certificate(variant_app: Synthesized) -> None:
    listeners = list(variant_app.resources("Workload", "AWS::ElasticLoadBalancingV2::Listener"))
    assert len(listeners) == 1  # no HTTP listener, no redirect
    _, listener = _one(variant_app, "AWS::ElasticLoadBalancingV2::Listener")
    props = listener["Properties"]
    assert (props["Port"], props["Protocol"]) == (443, "HTTPS")
    assert props["Certificates"] == [{"CertificateArn": CERTIFICATE}]
    assert props["SslPolicy"].startswith("ELBSecurityPolicy-TLS13")


def test_listener_validates_the_cognito_jwt_then_forwards(variant_app: Synthesized) -> None:
    _, listener = _one(variant_app, "AWS::ElasticLoadBalancingV2::Listener")
    pool_id, _ = _one(variant_app, "AWS::Cognito::UserPool")
    tg_id, _ = _one(variant_app, "AWS::ElasticLoadBalancingV2::TargetGroup")
    validate, forward = sorted(listener["Properties"]["DefaultActions"], key=lambda a: a["Order"])
    assert validate["Type"] == "jwt-validation"
    config = validate["JwtValidationConfig"]
    assert resolve(config["Issuer"]) == f"<{pool_id}.ProviderURL>"
    assert resolve(config["JwksEndpoint"]) == f"<{pool_id}.ProviderURL>/.well-known/jwks.json"
    assert config["AdditionalClaims"] == [
        {"Format": "space-separated-values", "Name": "scope", "Values": ["ray-llm/invoke"]},
        {"Format": "single-string", "Name": "token_use", "Values": ["access"]},
    ]
    assert forward == {"Order": 2, "Type": "forward", "TargetGroupArn": {"Ref": tg_id}}


def test_listener_validates_an_existing_idps_jwt(token_app: Synthesized) -> None:
    _, listener = _one(token_app, "AWS::ElasticLoadBalancingV2::Listener")
    validate = min(listener["Properties"]["DefaultActions"], key=lambda a: a["Order"])
    assert validate["JwtValidationConfig"] == {
        "Issuer": IDP_ISSUER,
        "JwksEndpoint": IDP_JWKS,
        "AdditionalClaims": [
            {"Format": "space-separated-values", "Name": "scope", "Values": ["llm.invoke"]},
            {"Format": "single-string", "Name": "aud", "Values": ["ray-llm"]},
        ],
    }
    types = {r["Type"] for r in token_app.templates["Workload"]["Resources"].values()}
    assert not {t for t in types if t.startswith("AWS::Cognito::")}


def test_claims_per_identity_provider() -> None:
    base = {
        "region": "us-west-2",
        "endpointExposure": "internal",
        "endpointCertificateArn": CERTIFICATE,
        "endpointAllowedCidrs": ["10.0.0.0/8"],
    }
    audience_only = DEFAULTS.with_overrides(
        {**base, "endpointJwtIssuer": IDP_ISSUER, "endpointJwksUri": IDP_JWKS}
        | {"endpointJwtAudience": "api://llm"}
    )
    assert jwt_claims(audience_only) == [
        {"Format": "single-string", "Name": "aud", "Values": ["api://llm"]}
    ]
    assert jwt_claims(DEFAULTS.with_overrides({**base, "endpointAuth": "none"})) == []


def test_target_group_is_ip_on_8000_with_the_serve_health_check(variant_app: Synthesized) -> None:
    _, tg = _one(variant_app, "AWS::ElasticLoadBalancingV2::TargetGroup")
    props = tg["Properties"]
    assert (props["TargetType"], props["Port"], props["Protocol"]) == ("ip", 8000, "HTTP")
    assert props["HealthCheckPath"] == "/-/healthz"
    assert props["Matcher"] == {"HttpCode": "200"}
    assert "Targets" not in props  # the controller registers the pods


# -- security groups ------------------------------------------------------------------------


def test_alb_accepts_443_only_from_the_allowed_cidrs(variant_app: Synthesized) -> None:
    _, sg = _one(variant_app, "AWS::EC2::SecurityGroup")
    ingress = sg["Properties"]["SecurityGroupIngress"]
    assert [(r["CidrIp"], r["FromPort"], r["ToPort"], r["IpProtocol"]) for r in ingress] == [
        ("10.0.0.0/8", 443, 443, "tcp"),
        ("192.168.10.0/24", 443, 443, "tcp"),
    ]
    to_pods, to_issuer = sg["Properties"]["SecurityGroupEgress"]
    assert (to_pods["FromPort"], to_pods["ToPort"], to_pods["IpProtocol"]) == (8000, 8000, "tcp")
    assert "ClusterSecurityGroupId" in resolve(to_pods["DestinationSecurityGroupId"])
    # jwt-validation fetches the issuer's JWKS (Cognito here) over HTTPS.
    assert (to_issuer["FromPort"], to_issuer["ToPort"], to_issuer["IpProtocol"]) == (
        443,
        443,
        "tcp",
    )
    assert to_issuer["CidrIp"] == "0.0.0.0/0"


@pytest.mark.parametrize("name", ["variant_app", "token_app"])
def test_jwt_validating_alb_may_fetch_the_issuers_keys(
    name: str, request: pytest.FixtureRequest
) -> None:
    """Cognito's pool (variant) and an external issuer (token): the listener validates JWTs, so
    the ALB must reach the JWKS endpoint over HTTPS, else every request fails."""
    app: Synthesized = request.getfixturevalue(name)
    _, sg = _one(app, "AWS::EC2::SecurityGroup")
    https_out = [
        e
        for e in sg["Properties"]["SecurityGroupEgress"]
        if (e["FromPort"], e["ToPort"], e["IpProtocol"]) == (443, 443, "tcp")
    ]
    assert [e.get("CidrIp") for e in https_out] == ["0.0.0.0/0"]
    assert "JWKS" in https_out[0]["Description"]


def test_serve_port_accepts_only_the_albs_security_group(variant_app: Synthesized) -> None:
    sg_id, _ = _one(variant_app, "AWS::EC2::SecurityGroup")
    rules = [
        r["Properties"]
        for k, r in variant_app.resources("Workload", "AWS::EC2::SecurityGroupIngress").items()
        if k.startswith("ApplicationEndpoint") and "EndpointProbe" not in k
    ]
    assert len(rules) == 1
    (rule,) = rules
    assert "ClusterSecurityGroupId" in resolve(rule["GroupId"])
    assert rule["SourceSecurityGroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]}
    assert (rule["FromPort"], rule["ToPort"], rule["IpProtocol"]) == (8000, 8000, "tcp")
    assert "CidrIp" not in rule


def test_the_internet_is_allowed_only_as_configured(token_app: Synthesized) -> None:
    _, sg = _one(token_app, "AWS::EC2::SecurityGroup")
    assert [r["CidrIp"] for r in sg["Properties"]["SecurityGroupIngress"]] == ["0.0.0.0/0"]


# -- Cognito ------------------------------------------------------------------------------


def test_cognito_pool_for_machines_only(variant_app: Synthesized) -> None:
    pool_id, pool = _one(variant_app, "AWS::Cognito::UserPool")
    assert pool["DeletionPolicy"] == "Delete"
    assert pool["Properties"]["DeletionProtection"] == "INACTIVE"
    assert pool["Properties"]["AdminCreateUserConfig"] == {"AllowAdminCreateUserOnly": True}
    rs_id, rs = _one(variant_app, "AWS::Cognito::UserPoolResourceServer")
    assert rs["Properties"]["Identifier"] == "ray-llm"
    assert [s["ScopeName"] for s in rs["Properties"]["Scopes"]] == ["invoke"]
    _, client = _one(variant_app, "AWS::Cognito::UserPoolClient")
    props = client["Properties"]
    assert props["AllowedOAuthFlows"] == ["client_credentials"]
    assert props["GenerateSecret"] is True
    assert [resolve(s) for s in props["AllowedOAuthScopes"]] == [f"<{rs_id}>/invoke"]
    assert props["UserPoolId"] == {"Ref": pool_id}
    assert (props["AccessTokenValidity"], props["TokenValidityUnits"]) == (
        60,
        {"AccessToken": "minutes"},
    )
    _, domain = _one(variant_app, "AWS::Cognito::UserPoolDomain")
    # The stack id's first UUID block: unique, stable for the stack's life, no account id.
    assert domain["Properties"]["Domain"] == {
        "Fn::Join": [
            "-",
            [
                "ray-pd-eks",
                {
                    "Fn::Select": [
                        0,
                        {
                            "Fn::Split": [
                                "-",
                                {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]},
                            ]
                        },
                    ]
                },
            ],
        ]
    }


# -- the controller -----------------------------------------------------------------------


def test_controller_chart_is_pinned_with_its_settings(variant_app: Synthesized) -> None:
    _, chart = _chart(variant_app)
    props = chart["Properties"]
    # The vendored chart (assets/charts/), never fetched from a repository at deploy time.
    assert "Repository" not in props and "ChartAssetURL" in props
    assert LOAD_BALANCER_CONTROLLER.version == "3.5.0"
    assert (props["Release"], props["Namespace"], props["Wait"]) == (
        "aws-load-balancer-controller",
        "kube-system",
        True,
    )
    values = json.loads(resolve(props["Values"]))
    assert values["clusterName"] == "ray-llm-multinode"
    assert values["region"] == "us-west-2"
    assert values["vpcId"].startswith("<import:") and "Vpc" in values["vpcId"]
    assert values["watchNamespace"] == "inference"
    assert values["serviceAccount"] == {"create": False, "name": "aws-load-balancer-controller"}
    # It must create no load balancer of its own.
    assert values["createIngressClassResource"] is False
    assert values["ingressClassParams"] == {"create": False}
    assert values["enableServiceMutatorWebhook"] is False


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def test_controller_identity_may_only_keep_the_one_target_groups_targets(
    variant_app: Synthesized,
) -> None:
    _, association = _one(variant_app, "AWS::EKS::PodIdentityAssociation", "ApplicationEndpoint")
    props = association["Properties"]
    assert (props["Namespace"], props["ServiceAccount"]) == (
        "kube-system",
        "aws-load-balancer-controller",
    )
    role_id = props["RoleArn"]["Fn::GetAtt"][0]
    policy_id, policy = _one(variant_app, "AWS::IAM::Policy", "ApplicationEndpointControllerPolicy")
    assert policy["Properties"]["Roles"] == [{"Ref": role_id}]
    tg_id, _ = _one(variant_app, "AWS::ElasticLoadBalancingV2::TargetGroup")
    by_resource: dict[str, set[str]] = {}
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        assert statement["Effect"] == "Allow" and "Condition" not in statement
        resource = statement["Resource"]
        key = resource if isinstance(resource, str) else json.dumps(resource, sort_keys=True)
        by_resource.setdefault(key, set()).update(_actions(statement))
    assert by_resource == {
        "*": {
            "elasticloadbalancing:DescribeTargetGroups",
            "elasticloadbalancing:DescribeTargetHealth",
            "ec2:DescribeVpcs",
            "ec2:DescribeSecurityGroups",
        },
        json.dumps({"Ref": tg_id}): {
            "elasticloadbalancing:RegisterTargets",
            "elasticloadbalancing:DeregisterTargets",
        },
    }
    # Nothing that creates or changes a load balancer, a listener, a WAF association or a
    # security group rule (the upstream policy's mutating statements).
    granted = set().union(*by_resource.values())
    assert not any(
        verb in action
        for action in granted
        for verb in ("Create", "Delete", "Modify", "Set", "Authorize", "Revoke", "AddTags")
    )
    # The chart waits for the association and the policy (credentials are injected when a pod
    # starts; its first reconcile needs the rights).
    _, chart = _chart(variant_app)
    assert any(
        d.startswith("ApplicationEndpointControllerServiceAccount") for d in chart["DependsOn"]
    )
    assert policy_id in chart["DependsOn"]


def test_controller_calls_name_their_source_and_match_the_policy() -> None:
    """Every allowed action is one the controller's TargetGroupBinding path calls, each named
    with the source file it was read from, at the pinned chart's app version."""
    assert CONTROLLER_CALLS_READ_AT == LOAD_BALANCER_CONTROLLER_APP_VERSION
    assert len({c.action for c in CONTROLLER_CALLS}) == len(CONTROLLER_CALLS)
    for call in CONTROLLER_CALLS:
        assert re.search(r"(pkg|webhooks|controllers)/[a-z0-9_/]+\.go", call.source), call
    assert {c.action for c in CONTROLLER_CALLS if c.target_group_only} == {
        "elasticloadbalancing:RegisterTargets",
        "elasticloadbalancing:DeregisterTargets",
    }


def test_controller_runs_with_its_other_controllers_and_addons_off(
    variant_app: Synthesized,
) -> None:
    _, chart = _chart(variant_app)
    values = json.loads(resolve(chart["Properties"]["Values"]))
    assert values["controllerConfig"]["featureGates"] == {
        "EnableServiceController": False,
        "NLBGatewayAPI": False,
        "ALBGatewayAPI": False,
        "GlobalAcceleratorController": False,
    }
    for flag in ("enableShield", "enableWaf", "enableWafv2", "enableBackendSecurityGroup"):
        assert values[flag] is False, flag


def test_crd_file_matches_the_pinned_chart() -> None:
    assert f"v{LOAD_BALANCER_CONTROLLER.version}" == LOAD_BALANCER_CONTROLLER_APP_VERSION
    assert CRD_FILE.is_file()
    header = CRD_FILE.read_text().split("---", 1)[0]
    assert "tag v3.5.0" in header and "Apache License 2.0" in header


# -- the TargetGroupBinding ---------------------------------------------------------------


def _binding(app: Synthesized) -> tuple[dict[str, Any], dict[str, Any]]:
    _, resource = _kubernetes(app, "ApplicationEndpointTargetGroupBinding")
    (manifest,) = json.loads(resolve(resource["Properties"]["Manifest"]))
    return resource, manifest


def test_binding_targets_the_serve_service(variant_app: Synthesized) -> None:
    tg_id, _ = _one(variant_app, "AWS::ElasticLoadBalancingV2::TargetGroup")
    _, manifest = _binding(variant_app)
    assert manifest["apiVersion"] == "elbv2.k8s.aws/v1beta1"
    assert manifest["kind"] == "TargetGroupBinding"
    assert manifest["metadata"]["namespace"] == "inference"
    spec = manifest["spec"]
    assert spec["serviceRef"] == {"name": "ray-llm-serve-svc", "port": 8000}
    assert spec["targetGroupARN"] == f"<{tg_id}>"
    assert spec["targetType"] == "ip"
    assert "networking" not in spec  # the SG rule is CloudFormation's, not the controller's


def test_binding_validates_against_the_controllers_crd(variant_app: Synthesized) -> None:
    _, manifest = _binding(variant_app)
    manifest["metadata"]["labels"] = {"app.kubernetes.io/part-of": "ray-pd-eks"}
    jsonschema.validate(manifest, _tgb_schema())
    rendered = render_target_group_binding(
        DEFAULTS, target_group_arn="arn:aws:elasticloadbalancing:x", vpc_id="vpc-1"
    )
    jsonschema.validate(rendered, _tgb_schema())


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("targetType", "pod", "'pod' is not one of"),
        ("serviceRef", {"name": "ray-llm-serve-svc"}, "'port' is a required property"),
        ("targetGroupArn", "arn:x", "Additional properties are not allowed"),
    ],
)
def test_crd_check_rejects_a_broken_binding(field: str, value: Any, message: str) -> None:
    bad = render_target_group_binding(DEFAULTS, target_group_arn="arn:x", vpc_id="vpc-1")
    bad["spec"][field] = value
    with pytest.raises(jsonschema.ValidationError, match=re.escape(message)):
        jsonschema.validate(bad, _tgb_schema())


def test_binding_after_controller_and_rayservice_so_destroy_removes_it_first(
    variant_app: Synthesized,
) -> None:
    resource, _ = _binding(variant_app)
    chart_id, _ = _chart(variant_app)
    rayservice_id, _ = _kubernetes(variant_app, "WorkloadRayService")
    # CloudFormation deletes a resource before what it depends on: the binding (whose
    # finalizer needs the controller to deregister the targets) goes before the controller.
    assert chart_id in resource["DependsOn"]
    assert rayservice_id in resource["DependsOn"]
    assert resource["DeletionPolicy"] == "Delete"


# -- rules, outputs and warnings ------------------------------------------------------------


def test_certificate_region_rule_only_without_a_region(
    variant_app: Synthesized, token_app: Synthesized
) -> None:
    rules = token_app.templates["Workload"]["Rules"]
    (name,) = [k for k in rules if k.startswith("ApplicationEndpoint")]
    (assertion,) = rules[name]["Assertions"]
    assert assertion["Assert"] == {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-west-2"]}
    assert "endpointCertificateArn" in assertion["AssertDescription"]
    variant_rules = variant_app.templates["Workload"].get("Rules", {})
    assert not [k for k in variant_rules if k.startswith("ApplicationEndpoint")]


def test_outputs_give_the_url_and_the_exact_commands(variant_app: Synthesized) -> None:
    outputs = {
        k: resolve(v["Value"]) for k, v in variant_app.templates["Workload"]["Outputs"].items()
    }
    lb_id, _ = _one(variant_app, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    pool_id, _ = _one(variant_app, "AWS::Cognito::UserPool")
    client_id, _ = _one(variant_app, "AWS::Cognito::UserPoolClient")
    domain_id, _ = _one(variant_app, "AWS::Cognito::UserPoolDomain")
    url = f"https://<{lb_id}.DNSName>"
    assert outputs["EndpointUrl"] == url
    token_url = f"https://<{domain_id}>.auth.us-west-2.amazoncognito.com/oauth2/token"
    assert outputs["EndpointTokenUrl"] == token_url
    assert outputs["EndpointUserPoolId"] == f"<{pool_id}>"
    assert outputs["EndpointClientId"] == f"<{client_id}>"
    assert outputs["EndpointScope"] == "ray-llm/invoke"
    assert outputs["EndpointTokenCommand"] == (
        f'export TOKEN=$(curl -s -u "<{client_id}>:$(aws cognito-idp '
        f"describe-user-pool-client --user-pool-id <{pool_id}> --client-id "
        f"<{client_id}> --region us-west-2 --query UserPoolClient.ClientSecret --output "
        f'text)" -d grant_type=client_credentials -d scope=ray-llm/invoke {token_url} | '
        "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"access_token\"])')"
    )
    assert outputs["EndpointCurlCommand"].startswith(
        f'curl -s {url}/v1/chat/completions -H "Authorization: Bearer $TOKEN"'
    )
    assert f"base_url='{url}/v1', api_key=os.environ['TOKEN']" in outputs["EndpointOpenAiPython"]


def test_outputs_use_the_domain_name_when_given(token_app: Synthesized) -> None:
    outputs = {
        k: resolve(v["Value"]) for k, v in token_app.templates["Workload"]["Outputs"].items()
    }
    assert outputs["EndpointUrl"] == "https://llm.example.com"
    assert outputs["EndpointJwtIssuer"] == IDP_ISSUER
    assert "EndpointTokenCommand" not in outputs  # tokens come from the user's own IdP


def _warnings(app: Synthesized) -> list[str]:
    """The Workload stack's synth warnings, as the assembly records them for `cdk synth`."""
    stack = "/" + app.stage.workload.node.path
    return [
        str(data)
        for path, data in app.metadata("aws:cdk:warning")
        if path == stack or path.startswith(stack + "/")
    ]


def test_synth_warns_when_the_certificate_cannot_match_the_url(
    variant_app: Synthesized, token_app: Synthesized
) -> None:
    assert any("endpointDomainName is empty" in w for w in _warnings(variant_app))
    assert not any("endpointDomainName is empty" in w for w in _warnings(token_app))


def test_synth_warns_about_an_endpoint_without_authentication() -> None:
    config = DEFAULTS.with_overrides(
        {
            "region": "us-west-2",
            "endpointExposure": "internal",
            "endpointCertificateArn": CERTIFICATE,
            "endpointAllowedCidrs": ["10.0.0.0/8"],
            "endpointDomainName": "llm.internal.example.com",
            "endpointAuth": "none",
        }
    )
    ((warning_id, text),) = endpoint_warnings(config)
    assert warning_id == "ray-pd-eks:endpointWithoutAuth"
    assert "from 10.0.0.0/8 can call the model" in text
    assert endpoint_warnings(config.with_overrides({"endpointAuth": "jwt"})) == []


# -- access logs ------------------------------------------------------------------------------


def test_access_logs_go_to_an_encrypted_private_bucket(variant_app: Synthesized) -> None:
    _, lb = _one(variant_app, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    bucket_id, bucket = _one(variant_app, "AWS::S3::Bucket")
    attributes = {a["Key"]: a["Value"] for a in lb["Properties"]["LoadBalancerAttributes"]}
    assert attributes["access_logs.s3.enabled"] == "true"
    assert attributes["access_logs.s3.bucket"] == {"Ref": bucket_id}
    props = bucket["Properties"]
    (encryption,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}  # ALB: SSE-S3
    assert all(props["PublicAccessBlockConfiguration"].values())
    (rule,) = props["LifecycleConfiguration"]["Rules"]
    assert rule["ExpirationInDays"] == variant_app.config.log_retention_days == 365
    # retainLogs keeps it, like the log groups (tests/test_teardown.py's allow-list).
    assert bucket["DeletionPolicy"] == "Retain"
    policy_id, policy = _one(variant_app, "AWS::S3::BucketPolicy")
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}} for s in statements)
    writers = [s for s in statements if s["Action"] == "s3:PutObject"]
    assert writers and all("/alb/AWSLogs/123456789012/*" in json.dumps(s) for s in writers)
    assert not variant_app.resources("Workload", "Custom::S3AutoDeleteObjects")
    # The ALB checks that it may write when logging is switched on: policy first.
    assert policy_id in lb["DependsOn"]


def test_access_log_bucket_is_emptied_and_deleted_on_destroy() -> None:
    """Without retainLogs the bucket goes with the stack (emptied first: CloudFormation cannot
    delete a bucket that holds objects). A small stack: no cluster needed."""
    app = cdk.App()
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account="123456789012", region="us-west-2"))
    AccessLogBucket(stack, "AccessLogs", config=DEFAULTS.with_overrides({"logRetentionDays": 7}))
    template = app.synth().get_stack_artifact("Probe").template
    (bucket,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::S3::Bucket"]
    assert bucket["DeletionPolicy"] == "Delete"
    assert bucket["Properties"]["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == 7
    cleaners = [
        r for r in template["Resources"].values() if r["Type"] == "Custom::S3AutoDeleteObjects"
    ]
    assert len(cleaners) == 1


def test_no_access_logs_without_a_region(token_app: Synthesized, variant_app: Synthesized) -> None:
    assert token_app.resources("Workload", "AWS::S3::Bucket") == {}
    _, lb = _one(token_app, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    keys = {a["Key"] for a in lb["Properties"]["LoadBalancerAttributes"]}
    assert "access_logs.s3.enabled" not in keys
    assert any("writes no access logs" in w for w in _warnings(token_app))
    assert not any("writes no access logs" in w for w in _warnings(variant_app))


# -- the rate limit (AWS WAF) ------------------------------------------------------------------


def test_internet_facing_endpoint_has_a_per_ip_rate_limit(token_app: Synthesized) -> None:
    acl_id, acl = _one(token_app, "AWS::WAFv2::WebACL")
    props = acl["Properties"]
    assert props["Scope"] == "REGIONAL" and props["DefaultAction"] == {"Allow": {}}
    (rule,) = props["Rules"]
    assert rule["Action"] == {"Block": {}}
    assert rule["Statement"] == {
        "RateBasedStatement": {
            "AggregateKeyType": "IP",
            "Limit": token_app.config.endpoint_rate_limit_per5_min,
            "EvaluationWindowSec": 300,
        }
    }
    assert token_app.config.endpoint_rate_limit_per5_min == DEFAULTS.endpoint_rate_limit_per5_min
    assert DEFAULTS.endpoint_rate_limit_per5_min == 1000
    _, association = _one(token_app, "AWS::WAFv2::WebACLAssociation")
    lb_id, _ = _one(token_app, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    assert association["Properties"] == {
        "ResourceArn": {"Ref": lb_id},
        "WebACLArn": {"Fn::GetAtt": [acl_id, "Arn"]},
    }


def test_no_web_acl_when_internal_or_switched_off(variant_app: Synthesized) -> None:
    assert variant_app.config.endpoint_rate_limit_per5_min == 1000
    assert not variant_app.resources("Workload", "AWS::WAFv2::WebACL")
    app = cdk.App()
    stack = cdk.Stack(app, "S")
    config = DEFAULTS.with_overrides(
        {
            "endpointExposure": "internet-facing",
            "endpointAllowedCidrs": ["0.0.0.0/0"],
            "endpointCertificateArn": CERTIFICATE,
            "endpointRateLimitPer5Min": 0,
        }
    )
    assert config.endpoint_rate_limit_per5_min == 0
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_elasticloadbalancingv2 as elbv2

    from pd_constructs.endpoint.endpoint import RateLimit

    # The construct is created only when the limit is set (ModelEndpoint's condition).
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=0)
    alb = elbv2.ApplicationLoadBalancer(stack, "Alb", vpc=vpc, internet_facing=True)
    RateLimit(stack, "RateLimit", load_balancer=alb, limit_per_5min=10)
    template = app.synth().get_stack_by_name("S").template
    (acl,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::WAFv2::WebACL"]
    assert acl["Properties"]["Rules"][0]["Statement"]["RateBasedStatement"]["Limit"] == 10
