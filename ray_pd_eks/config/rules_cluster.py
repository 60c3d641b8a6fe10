"""Rules of the account and region, the cluster's names and who may administer it, the software
it runs (images and versions), teardown and observability. Each rule takes an
:class:`~ray_pd_eks.config.settings.AppConfig` and returns its problem lines
(:mod:`ray_pd_eks.config.validation` lists them in order).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ray_pd_eks.charts import vendored_versions
from ray_pd_eks.config.limits import (
    ACCOUNT_RE,
    ALARM_ERROR_PERCENT,
    ALARM_ITL_P95_SECONDS,
    ALARM_KV_CACHE_PERCENT,
    ALARM_TTFT_P95_SECONDS,
    CLOUDWATCH_ADDON_VERSION,
    CLUSTER_NAME_MAX,
    DEPLOYMENT_NAME_MAX,
    GPU_NODEGROUP_PREFIX_MAX,
    KUBECTL_LAYER_PACKAGES,
    LOG_RETENTION_DAYS,
    MIN_CLOUDWATCH_ADDON_MAJOR,
    MODEL_SOURCE_RE,
    NEWEST_EKS_MINOR,
    OBSERVABILITY,
    OLDEST_EKS_MINOR,
    RAYSERVICE_NAME_MAX,
    derive_model_id,
)
from ray_pd_eks.config.parsing import HOST_BITS, read_cidr
from ray_pd_eks.config.problems import CLI_NAME, Bounds, Form, OneOf, check, problem
from ray_pd_eks.dlc_images import DLC_DOC, dlc_registry
from ray_pd_eks.eks_images import ADD_ONS_IMAGES_DOC, EKS_IMAGE_REGISTRIES
from ray_pd_eks.trust import registry_problem

if TYPE_CHECKING:
    from ray_pd_eks.config.settings import AppConfig

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DEPLOYMENT_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_EKS_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]*$")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
_ADDON_VERSION = re.compile(r"^v(?P<major>\d+)\.\d+\.\d+-eksbuild\.\d+$")
_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")
# An Identity Center role named without its path: .../role/AWSReservedSSO_<set>_<id>.
_SSO_ROLE_WITHOUT_PATH = re.compile(r":role/AWSReservedSSO_")
_ASSUMED_ROLE = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[\w+=,.@-]+)/"
)
_PRINCIPAL = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Practical form of an address SNS can deliver to: one @, no spaces, a dotted domain.
_EMAIL = re.compile(r"^[^@\s]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
_IMAGE = re.compile(
    r"^[a-z0-9.-]+(:\d+)?/[a-z0-9._/-]+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$"
)

_ACCOUNT = Form("account", ACCOUNT_RE, "must be a 12-digit AWS account id or empty")


def environment(c: AppConfig) -> list[str]:
    out = _ACCOUNT(c)
    if c.region and not _REGION.match(c.region):
        out.append(problem("region", c.region, "must be an AWS region such as us-west-2, or empty"))
    elif c.region and c.region not in EKS_IMAGE_REGISTRIES:
        # The EFA device plugin's image comes from EKS's registry in the deploy region.
        why = (
            "has no Amazon EKS image registry known to this app (ray_pd_eks/eks_images.py); "
            f"add the region's registry from {ADD_ONS_IMAGES_DOC}, or deploy to another region"
        )
        out.append(problem("region", c.region, why))
    elif c.region and not c.dlc_image and dlc_registry(c.region) is None:
        why = (
            "has no AWS Deep Learning Containers registry (AWS documents none there: "
            f"{DLC_DOC}), so the default Ray LLM image cannot be pulled; copy the image into "
            "an ECR repository of that region and set dlcImage to it, or deploy to another "
            "region"
        )
        out.append(problem("region", c.region, why))
    return out


def kubernetes(c: AppConfig) -> list[str]:
    v = c.kubernetes_version
    allowed = " or ".join(KUBECTL_LAYER_PACKAGES)
    if v in KUBECTL_LAYER_PACKAGES:
        return []
    m = re.fullmatch(r"1\.(\d+)", v)
    if not m:
        why = f"not a Kubernetes minor version; use {allowed}"
    elif int(m.group(1)) < OLDEST_EKS_MINOR:
        why = f"EKS no longer supports it (no new clusters); use {allowed}"
    elif int(m.group(1)) > NEWEST_EKS_MINOR:
        why = f"EKS does not offer it yet; use {allowed}"
    else:
        why = f"this app has no kubectl layer for it; use {allowed}"
    return [problem("kubernetesVersion", v, why)]


def _name(key: str, value: str, pattern: re.Pattern[str], max_len: int, kind: str) -> list[str]:
    if not value:
        return [problem(key, value, f"must not be empty; use a {kind}")]
    if len(value) > max_len:
        return [problem(key, value, f"is {len(value)} characters; the limit is {max_len}")]
    if not pattern.match(value):
        return [problem(key, value, f"is not a valid {kind}")]
    return []


def _deployment_name(c: AppConfig) -> list[str]:
    name = c.deployment_name
    if not name:
        return []
    if len(name) > DEPLOYMENT_NAME_MAX:
        why = f"is {len(name)} characters; the limit is {DEPLOYMENT_NAME_MAX} (a prefix of names)"
    elif not _DEPLOYMENT_NAME.match(name):
        why = (
            "must be lowercase letters, digits and '-', starting with a letter and ending with a "
            "letter or digit (it prefixes the stack and cluster names), e.g. alice or team-a"
        )
    else:
        return []
    return [problem("deploymentName", name, why)]


def names(c: AppConfig) -> list[str]:
    label = "Kubernetes name (lowercase letters, digits and '-', starting and ending alphanumeric)"
    eks = "EKS name (letters, digits, '-' and '_', starting with a letter or digit)"
    deployment = _deployment_name(c)  # a bad one would make the cluster's name bad too
    return [
        *deployment,
        *(
            []
            if deployment
            else _name("clusterName", c.cluster_name, _EKS_NAME, CLUSTER_NAME_MAX, eks)
        ),
        *_name("namespace", c.namespace, _DNS_LABEL, 63, label),
        *_name("rayServiceName", c.ray_service_name, _DNS_LABEL, RAYSERVICE_NAME_MAX, label),
        *_name(
            "gpuNodegroupName",
            c.gpu_nodegroup_name,
            _EKS_NAME,
            GPU_NODEGROUP_PREFIX_MAX,
            eks + ", to which the AZ and a hash are appended",
        ),
        *_model_id(c),
    ]


def _model_id(c: AppConfig) -> list[str]:
    if c.model_id == derive_model_id(c.model_source) and not MODEL_SOURCE_RE.match(c.model_source):
        return []  # derived from an invalid modelSource, whose own line says what to fix
    return _name("modelId", c.model_id, _MODEL_ID, 128, "model id (letters, digits, '.', '_', '-')")


def software(c: AppConfig) -> list[str]:
    out = []
    images = (
        ("dlcImage", c.dlc_image),
        ("awsCliImage", c.aws_cli_image),
        ("prefetchImage", c.prefetch_image),
    )
    for key, image in images:
        if not image and key == "dlcImage":
            continue
        if not _IMAGE.match(image):
            why = "must be a full image reference registry/repository:tag (or @sha256:...)"
            out.append(problem(key, image, why + (", or empty" if key == "dlcImage" else "")))
        elif image.endswith(":latest"):
            why = (
                "pin a version tag or digest: nodes keep an image once pulled "
                "(IfNotPresent), so ':latest' would differ from node to node"
            )
            out.append(problem(key, image, why))
        elif unknown := registry_problem(image, c.account):
            out.append(problem(key, image, unknown))
    if not _SEMVER.match(c.kuberay_version):
        out.append(problem("kuberayVersion", c.kuberay_version, "must be a version like 1.7.0"))
    elif tuple(int(p) for p in c.kuberay_version.split(".")) < (1, 6, 0):
        why = (
            "must be 1.6.0 or newer (the RayService Ready condition and upgradeStrategy; "
            "rayClusterConfig.authOptions.secretName for Ray token authentication)"
        )
        out.append(problem("kuberayVersion", c.kuberay_version, why))
    elif c.kuberay_version not in vendored_versions("kuberay-operator"):
        why = (
            "no vendored chart of that version (charts install from assets/charts/, never "
            f"from a repository): use {', '.join(vendored_versions('kuberay-operator'))}, or "
            "vendor it with scripts/vendor_chart.py"
        )
        out.append(problem("kuberayVersion", c.kuberay_version, why))
    if not _SEMVER.match(c.ray_version):
        out.append(problem("rayVersion", c.ray_version, "must be a version like 2.58.0"))
    elif tuple(int(p) for p in c.ray_version.split(".")) < (2, 52, 0):
        why = "must be 2.52.0 or newer (Ray token authentication, RAY_AUTH_MODE=token)"
        out.append(problem("rayVersion", c.ray_version, why))
    if not _ADDON_VERSION.match(c.vpc_cni_addon_version):
        why = (
            "must be an EKS add-on version like v1.23.0-eksbuild.1 (list them with `aws eks "
            "describe-addon-versions --addon-name vpc-cni --kubernetes-version <version>`)"
        )
        out.append(problem("vpcCniAddonVersion", c.vpc_cni_addon_version, why))
    elif tuple(int(p) for p in c.vpc_cni_addon_version[1:].split("-")[0].split(".")) < (1, 14, 0):
        why = "must be v1.14.0 or newer (the first with network-policy enforcement)"
        out.append(problem("vpcCniAddonVersion", c.vpc_cni_addon_version, why))
    return out


def access(c: AppConfig) -> list[str]:
    out = []
    for arn in c.admin_principal_arns:
        session = _ASSUMED_ROLE.match(arn)
        if session:
            # What `aws sts get-caller-identity` shows for a role: the session, not the role.
            role = f"arn:{session['partition']}:iam::{session['account']}:role/{session['role']}"
            why = (
                f"an STS session of the role {role}, not a principal EKS can grant: list the "
                f"role's ARN, with its path if it has one (`{CLI_NAME} settings --add-admin-me` "
                "reads it from IAM)"
            )
            out.append(problem("adminPrincipalArns", arn, why))
        elif not _PRINCIPAL.match(arn):
            why = "each entry must be an IAM role or user ARN, arn:aws:iam::<account>:role/<name>"
            out.append(problem("adminPrincipalArns", arn, why))
        elif _SSO_ROLE_WITHOUT_PATH.search(arn):
            # IAM Identity Center user guide, "Referencing permission sets in resource
            # policies, Amazon EKS cluster configuration maps, and AWS KMS key policies".
            why = (
                "an IAM Identity Center role's ARN has the path aws-reserved/sso.amazonaws.com/ "
                "(then the Identity Center region, unless us-east-1); without it EKS refuses the "
                "access entry: the principal does not exist. `"
                f"{CLI_NAME} settings --add-admin-me` reads the full ARN"
            )
            out.append(problem("adminPrincipalArns", arn, why))
    for cidr in c.endpoint_public_cidrs:
        net, why = read_cidr(cidr, "203.0.113.7/32")
        if net is None:
            out.append(problem("endpointPublicCidrs", cidr, why))
            continue
        if net.prefixlen < 8:
            why = "opens the Kubernetes API to the internet; give your own network, e.g. a /32"
            out.append(problem("endpointPublicCidrs", cidr, why))
    vpc, why = read_cidr(c.vpc_cidr, "10.0.0.0/16")
    if vpc is not None and (not 16 <= vpc.prefixlen <= 18 or not vpc.is_private):
        vpc = None
    if vpc is None and not why.startswith(HOST_BITS):
        why = "must be a private IPv4 CIDR from /16 to /18, e.g. 10.0.0.0/16"
    if vpc is None:
        out.append(problem("vpcCidr", c.vpc_cidr, why))
    return out


LOG_RETENTION = OneOf(
    "logRetentionDays",
    LOG_RETENTION_DAYS,
    f"must be a CloudWatch Logs retention: {', '.join(map(str, LOG_RETENTION_DAYS))}",
)
_OBSERVABILITY = OneOf(
    "observability",
    OBSERVABILITY,
    "must be cloudwatch (CloudWatch add-on, PodMonitors, dashboard, alarms) or none "
    "(bring your own monitoring)",
)
_ALARM_EMAIL = Form(
    "alarmEmail",
    _EMAIL,
    "must be an e-mail address such as oncall@example.com, or empty for no subscription",
)
# Alarm thresholds, in the setting's unit.
_ALARM_THRESHOLDS = tuple(
    Bounds(key, low, high, f"must be {low:g}..{high:g} {unit}")
    for key, (low, high), unit in (
        ("alarmTtftP95Seconds", ALARM_TTFT_P95_SECONDS, "s"),
        ("alarmInterTokenP95Seconds", ALARM_ITL_P95_SECONDS, "s"),
        ("alarmErrorPercent", ALARM_ERROR_PERCENT, "%"),
        ("alarmKvCachePercent", ALARM_KV_CACHE_PERCENT, "%"),
    )
)


def observability(c: AppConfig) -> list[str]:
    out = _OBSERVABILITY(c)
    m = _ADDON_VERSION.match(c.cloudwatch_addon_version)
    if not m:
        why = f"must be an EKS add-on version such as {CLOUDWATCH_ADDON_VERSION}"
        out.append(problem("cloudwatchAddonVersion", c.cloudwatch_addon_version, why))
    elif int(m["major"]) < MIN_CLOUDWATCH_ADDON_MAJOR:
        why = (
            f"must be v{MIN_CLOUDWATCH_ADDON_MAJOR}.0.0 or newer: older add-ons do not scrape "
            f"PodMonitors; use {CLOUDWATCH_ADDON_VERSION}"
        )
        out.append(problem("cloudwatchAddonVersion", c.cloudwatch_addon_version, why))
    return out + _ALARM_EMAIL(c) + check(_ALARM_THRESHOLDS, c)
