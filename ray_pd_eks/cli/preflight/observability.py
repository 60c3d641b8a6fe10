"""Preflight's observability checks: EKS offers the CloudWatch add-on's version for this
Kubernetes version, the configuration the stack passes fits that version's schema, and the
add-on's Pod Identity is the one the stack associates."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ray_pd_eks.cli.errors import AccessError
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding
from ray_pd_eks.cli.preflight.base import Checks
from ray_pd_eks.config.limits import MIN_CLOUDWATCH_ADDON_MAJOR
from ray_pd_eks.monitoring import (
    CLOUDWATCH_ADDON_NAME,
    CLOUDWATCH_AGENT_POLICY,
    CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
    addon_configuration,
)


class ObservabilityChecks(Checks):
    def observability(self) -> Iterator[Finding]:
        """The add-on version exists for this Kubernetes version, and the configuration the
        stack passes fits that version's schema (EKS would refuse it an hour into the deploy)."""
        c = self.config
        if not c.observability_enabled:
            yield Finding(OK, "observability", "none: no add-on, dashboard or alarms to check")
            return
        eks = self.aws.client("eks")
        try:
            offered = self._addon_versions(eks)
        except AccessError as err:
            yield Finding(WARN, "observability", f"cannot tell ({err.message})")
            return
        usable = sorted(
            (v for v in offered if addon_major(v) >= MIN_CLOUDWATCH_ADDON_MAJOR),
            key=addon_sort_key,
        )
        if c.cloudwatch_addon_version not in offered:
            if usable:
                why = (
                    f"offered: {', '.join(usable[-5:])}; set ray-pd-eks settings --set "
                    f"cloudwatchAddonVersion={usable[-1]}"
                )
            else:
                why = (
                    f"none >= v{MIN_CLOUDWATCH_ADDON_MAJOR} is offered here; set "
                    "ray-pd-eks settings --set observability=none or use another region"
                )
            yield Finding(
                FAIL,
                "observability",
                f"{CLOUDWATCH_ADDON_NAME} {c.cloudwatch_addon_version} is not offered for "
                f"Kubernetes {c.kubernetes_version} in {self.aws.region}; {why}",
            )
            return
        yield Finding(
            OK,
            "observability",
            f"{CLOUDWATCH_ADDON_NAME} {c.cloudwatch_addon_version} offered for Kubernetes "
            f"{c.kubernetes_version}",
        )
        try:
            with self.aws.errors("eks:DescribeAddonConfiguration"):
                answer = eks.describe_addon_configuration(
                    addonName=CLOUDWATCH_ADDON_NAME, addonVersion=c.cloudwatch_addon_version
                )
        except AccessError as err:
            yield Finding(WARN, "addon config", f"cannot tell ({err.message})")
            return
        try:
            schema = json.loads(answer.get("configurationSchema") or "{}")
        except ValueError:
            yield Finding(WARN, "addon config", "EKS returned an unreadable schema")
            return
        yield from self._agent_identity(answer.get("podIdentityConfiguration") or [])
        unknown = unknown_keys(addon_configuration(c.gpu_node_telemetry), schema)
        if unknown:
            yield Finding(
                FAIL,
                "addon config",
                f"{c.cloudwatch_addon_version} does not accept {', '.join(unknown)} "
                "(assets/addons/cloudwatch-observability.yaml): pick a version that does",
            )
        else:
            yield Finding(OK, "addon config", "the version's schema accepts the stack's values")

    def _agent_identity(self, identities: list[dict[str, Any]]) -> Iterator[Finding]:
        """EKS names the service account(s) of the add-on that take a Pod Identity role, and
        the managed policies it recommends: the stack associates one role, with
        CloudWatchAgentServerPolicy's actions narrowed to this cluster's log groups, to
        ``cloudwatch-agent``."""
        if not identities:
            return
        by_account = {i.get("serviceAccount"): i for i in identities}
        if CLOUDWATCH_AGENT_SERVICE_ACCOUNT not in by_account:
            yield Finding(
                FAIL,
                "addon identity",
                f"{self.config.cloudwatch_addon_version} expects Pod Identity for "
                f"{', '.join(sorted(str(a) for a in by_account))}, not "
                f"{CLOUDWATCH_AGENT_SERVICE_ACCOUNT}: pick a version that uses it",
            )
            return
        recommended = (
            by_account[CLOUDWATCH_AGENT_SERVICE_ACCOUNT].get("recommendedManagedPolicies") or []
        )
        if recommended and not any(
            arn.endswith(f"/{CLOUDWATCH_AGENT_POLICY}") for arn in recommended
        ):
            yield Finding(
                WARN,
                "addon identity",
                f"EKS recommends {', '.join(recommended)} for {CLOUDWATCH_AGENT_SERVICE_ACCOUNT}; "
                f"the stack's role is {CLOUDWATCH_AGENT_POLICY} narrowed to this cluster",
            )
            return
        yield Finding(
            OK,
            "addon identity",
            f"{CLOUDWATCH_AGENT_SERVICE_ACCOUNT} with {CLOUDWATCH_AGENT_POLICY}, as EKS recommends",
        )

    def _addon_versions(self, eks: Any) -> set[str]:
        versions: set[str] = set()
        token: str | None = None
        with self.aws.errors("eks:DescribeAddonVersions"):
            while True:
                kwargs = {"nextToken": token} if token else {}
                page = eks.describe_addon_versions(
                    addonName=CLOUDWATCH_ADDON_NAME,
                    kubernetesVersion=self.config.kubernetes_version,
                    **kwargs,
                )
                for addon in page.get("addons", []):
                    versions |= {v["addonVersion"] for v in addon.get("addonVersions", [])}
                token = page.get("nextToken")
                if not token:
                    return versions


def addon_major(version: str) -> int:
    m = re.match(r"^v(\d+)\.", version)
    return int(m.group(1)) if m else 0


def addon_sort_key(version: str) -> tuple[int, ...]:
    """``v8.1.0-eksbuild.2`` -> (8, 1, 0, 2): newest last."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def unknown_keys(values: Any, schema: Any, path: str = "") -> list[str]:
    """Paths of ``values`` whose key the JSON schema node's ``properties`` do not list (the
    add-on schemas EKS returns list every key they accept; a node without ``properties``
    accepts anything)."""
    if not isinstance(values, dict) or not isinstance(schema, dict):
        return []
    props = schema.get("properties")
    if not isinstance(props, dict):
        return []
    found = []
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        if key not in props:
            found.append(where)
        else:
            found += unknown_keys(value, props[key], where)
    return found
