"""Applies Ray cluster changes: a CDK ``custom_resources.Provider`` user handler that deletes the
RayService when its Ray cluster spec changed, and waits until its pods are gone.

Why: the RayService uses ``upgradeStrategy: None`` (a fixed GPU pool cannot hold a second Ray
cluster), and under ``None`` KubeRay applies Serve config changes in place but never rolls out
a change of ``rayClusterConfig`` (image, Ray version, worker count, resources, init containers,
service account). The deploy would apply the new manifest and "succeed" with the old cluster.

So this resource sits before the RayService manifest. Its ``ClusterSpecHash`` property is the
hash of the rendered ``rayClusterConfig``
(``pd_constructs.serving.workload.cluster_spec_hash``), which the manifest also writes on the
head pod template (annotation ``ray-pd-eks/cluster-spec-hash``), so the live RayCluster's head
template says which spec is *running*. Each poll:

1. RayService absent: wait until no pod of its Ray clusters (``ray.io/cluster=<name>-*``) is
   left, then complete; the manifest that follows creates it from the new spec.
2. RayService being deleted: wait.
3. Running spec (the active or pending RayCluster's annotation; before KubeRay created one, the
   RayService's own) equals ``ClusterSpecHash``: complete, nothing to do (a Serve-only change,
   or nothing changed).
4. Otherwise: delete the RayService (foreground, so KubeRay's RayCluster and its pods go first)
   and wait as in 1-2.

The endpoint is down from the delete until the readiness check passes on the new cluster; the
``Summary`` attribute (a stack output) says whether that happened. A rollback Update is answered
at once (no Kubernetes call) with the Data of the last completed run, carried in the physical
id, like the readiness check. ``Delete`` returns at once: the RayService manifest's own delete
removes the RayService.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import kube
from pd_lambda import props as props_helpers
from pd_lambda import rollback
from properties import RAYSERVICE_PROPERTIES, RayServiceProps

LOG = logging.getLogger("recreate")
LOG.setLevel(logging.INFO)

ANNOTATION = "ray-pd-eks/cluster-spec-hash"
STARTED_AT_KEY = "RecreateStartedAt"  # top-level, so it never leaks into the resource's Data
ROLLBACK_KEY = "RecreateRollback"
DEFAULT_TIMEOUT_SECONDS = 900
QUERY_INTERVAL_SECONDS = 15
LAMBDA_TIMEOUT_SECONDS = 120
MAX_REASON_CHARS = 1500
DATA_KEYS = ("Action", "ClusterSpecHash", "Summary")
REQUIRED_PROPERTIES = (*RAYSERVICE_PROPERTIES, "ClusterSpecHash")


class RecreateError(Exception):
    """A terminal failure: the deploy should stop now, with this message as the reason."""


@dataclass(frozen=True)
class Props(RayServiceProps):
    spec_hash: str
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Props:
        props_helpers.require(
            properties, REQUIRED_PROPERTIES, construct="RayServiceRecreate", error=RecreateError
        )
        raw_timeout = str(properties.get("TimeoutSeconds") or DEFAULT_TIMEOUT_SECONDS)
        if not raw_timeout.isdigit() or int(raw_timeout) < 1:
            raise RecreateError(
                f"TimeoutSeconds must be a positive whole number, got {raw_timeout!r}"
            )
        return cls(
            **cls.rayservice_fields(properties),
            spec_hash=str(properties["ClusterSpecHash"]),
            timeout_seconds=int(raw_timeout),
        )


# --- dependencies (replaced in tests) ------------------------------------------------------


def make_client(props: Props) -> kube.KubeClient:
    """A client authenticated as the Lambda's own IAM role (its EKS access entry)."""
    return kube.KubeClient(
        props.endpoint, props.ca_data, lambda: kube.eks_token(props.cluster_name)
    )


def cloudformation_client() -> Any:
    boto3 = importlib.import_module("boto3")
    config = importlib.import_module("botocore.config").Config(
        connect_timeout=5, read_timeout=10, retries={"max_attempts": 3, "mode": "standard"}
    )
    return boto3.client("cloudformation", config=config)


client_factory: Callable[[Props], kube.KubeClient] = make_client
clock: Callable[[], float] = time.time


# Whether the event's stack is UPDATE_ROLLBACK_IN_PROGRESS (pd_lambda.rollback), asked with
# this handler's CloudFormation client: stack_rolling_back(event, cloudformation=None).
stack_rolling_back = partial(
    rollback.stack_rolling_back, make_client=lambda: cloudformation_client()
)


# --- the Provider contract -----------------------------------------------------------------


def on_event(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """Start (Create/Update), answer a rollback at once, or end (Delete); no Kubernetes call.
    Runs outside the VPC: its only AWS call is DescribeStacks on the event's own stack."""
    request_type = event.get("RequestType")
    current = str(event.get("PhysicalResourceId") or "")
    if request_type == "Delete":
        LOG.info("Delete %s: the RayService manifest's delete removes the RayService", current)
        return {"PhysicalResourceId": current}
    if request_type == "Update" and stack_rolling_back(event):
        data = data_from_physical_id(current)
        LOG.info("Update during a rollback: answering at once with %s", data)
        return {"PhysicalResourceId": current, "Data": data, ROLLBACK_KEY: "true"}
    props = Props.from_properties(event.get("ResourceProperties") or {})
    physical_id = current if current.partition("?")[0] == props.physical_id else props.physical_id
    LOG.info("%s %s: cluster spec %s", request_type, props.physical_id, props.spec_hash)
    return {"PhysicalResourceId": physical_id, STARTED_AT_KEY: str(int(clock()))}


def is_complete(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """One poll: ``IsComplete`` False while the old cluster goes, Data when done."""
    if settled := rollback.settled(event, ROLLBACK_KEY):
        return settled
    props = Props.from_properties(event.get("ResourceProperties") or {})
    now = clock()
    started = props_helpers.started_at(event, STARTED_AT_KEY, now)
    try:
        done, status = poll(props, client_factory(props))
    except (kube.KubeApiError, RecreateError) as exc:
        if isinstance(exc, (kube.KubeAuthError, kube.KubeTlsError, RecreateError)):
            raise props_helpers.poll_failed(
                RecreateError, f"Recreating {props.physical_id} failed: {exc}", MAX_REASON_CHARS
            ) from None
        done, status = None, f"Kubernetes API error, retrying: {exc}"
    if done is not None:
        data = outcome_data(done, props.spec_hash, _old_hash(event))
        LOG.info("poll: COMPLETE: %s", data["Summary"])
        return {
            "IsComplete": True,
            "Data": data,
            "PhysicalResourceId": physical_id_with_data(props.physical_id, done, data),
        }
    elapsed = now - started
    LOG.info("poll: pending (%.0f s of %d s): %s", elapsed, props.timeout_seconds, status)
    if elapsed >= max(
        props.timeout_seconds / 2, props.timeout_seconds - 2 * LAMBDA_TIMEOUT_SECONDS
    ):
        raise props_helpers.poll_failed(
            RecreateError,
            f"Recreating {props.physical_id} timed out after {elapsed / 60:.0f} min: {status}. "
            f"Look at the pods: kubectl get pods -n {props.namespace} -o wide (a finalizer or a "
            "node that stopped responding keeps a pod Terminating), then redeploy",
            MAX_REASON_CHARS,
        )
    return {"IsComplete": False}


def _old_hash(event: Mapping[str, Any]) -> str:
    if event.get("RequestType") != "Update":
        return ""
    return str((event.get("OldResourceProperties") or {}).get("ClusterSpecHash") or "")


# --- one poll ------------------------------------------------------------------------------


def poll(props: Props, client: kube.KubeClient) -> tuple[str | None, str]:
    """(``"created"``/``"recreated"``/``"unchanged"`` when done else None, what is going on)."""
    ns, name = props.namespace, props.rayservice
    path = f"/apis/ray.io/v1/namespaces/{ns}/rayservices/{name}"
    try:
        rayservice: dict[str, Any] | None = client.get_json(path)
    except kube.KubeApiError as exc:
        if exc.status != 404:
            raise
        rayservice = None
    if rayservice is None:
        left = _ray_pods(client, props)
        if left:
            return None, f"RayService deleted; waiting for {len(left)} pod(s) to go: " + ", ".join(
                left[:6]
            )
        return "absent", "no RayService and no Ray pod: the manifest creates it from the new spec"
    if (rayservice.get("metadata") or {}).get("deletionTimestamp"):
        return None, f"RayService {ns}/{name} is being deleted (its RayCluster and pods first)"
    running = running_spec_hash(client, props, rayservice)
    if running == props.spec_hash:
        return "unchanged", f"Ray cluster spec {running} is already running"
    LOG.info(
        "Ray cluster spec changed (%s -> %s): deleting RayService %s/%s",
        running or "unknown",
        props.spec_hash,
        ns,
        name,
    )
    body = json.dumps(
        {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"}
    ).encode()
    try:
        client.request("DELETE", path, body=body, headers={"Content-Type": "application/json"})
    except kube.KubeApiError as exc:
        if exc.status != 404:
            raise
    return None, (
        f"deleted RayService {ns}/{name} (running spec {running or 'unknown'}, new spec "
        f"{props.spec_hash}); waiting for its Ray cluster to go"
    )


def running_spec_hash(client: kube.KubeClient, props: Props, rayservice: Mapping[str, Any]) -> str:
    """The spec hash of the Ray cluster that runs: the active (else pending) RayCluster's head
    template annotation; before KubeRay created a RayCluster, the RayService's own. "" when
    unknown (created before the annotation existed), which counts as changed."""
    status = rayservice.get("status") or {}
    names = [
        str((status.get(key) or {}).get("rayClusterName") or "")
        for key in ("activeServiceStatus", "pendingServiceStatus")
    ]
    for cluster in filter(None, names):
        try:
            raycluster = client.get_json(
                f"/apis/ray.io/v1/namespaces/{props.namespace}/rayclusters/{cluster}"
            )
        except kube.KubeApiError as exc:
            if exc.status == 404:
                continue
            raise
        return _annotation(raycluster.get("spec") or {})
    return _annotation((rayservice.get("spec") or {}).get("rayClusterConfig") or {})


def _annotation(cluster_spec: Mapping[str, Any]) -> str:
    template = (cluster_spec.get("headGroupSpec") or {}).get("template") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION) or "")


def _ray_pods(client: kube.KubeClient, props: Props) -> list[str]:
    """Pods of this RayService's Ray clusters (KubeRay names them ``<rayservice>-<suffix>`` and
    labels every pod ``ray.io/cluster``), terminating ones included."""
    pods = client.get_json(f"/api/v1/namespaces/{props.namespace}/pods")
    prefix = f"{props.rayservice}-"
    return sorted(
        str(pod["metadata"].get("name"))
        for pod in pods.get("items") or []
        if str(
            ((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/cluster", "")
        ).startswith(prefix)
    )


# --- Data and the physical id ----------------------------------------------------------------


def outcome_data(done: str, spec_hash: str, old_hash: str) -> dict[str, str]:
    """The Data (and the stack output ``RayClusterChange``): what this deploy did to the Ray
    cluster, and the downtime it meant."""
    if done == "unchanged":
        action = "unchanged"
        summary = (
            f"unchanged: Ray cluster spec {spec_hash} already running; Serve-level changes "
            "apply in place (the app redeploys on the running cluster)"
        )
    else:
        action = "recreated" if old_hash else "created"
        change = f" ({old_hash} -> {spec_hash})" if old_hash and old_hash != spec_hash else ""
        summary = (
            f"recreated: the Ray cluster spec changed{change}; the RayService was deleted and is "
            "re-created from the new spec, so the endpoint is down until the readiness check "
            "passes on the new cluster"
            if action == "recreated"
            else f"created: Ray cluster spec {spec_hash}"
        )
    return {"Action": action, "ClusterSpecHash": spec_hash, "Summary": summary}


def physical_id_with_data(base: str, done: str, data: Mapping[str, str]) -> str:
    query = urllib.parse.urlencode({key: data[key] for key in DATA_KEYS})
    return f"{base}?{query}"


def data_from_physical_id(physical_id: str) -> dict[str, str]:
    """The Data of the run that set this id; an id without it says so in every key."""
    _, _, query = physical_id.partition("?")
    carried = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    unknown = "unknown: not re-checked while the stack rolled back"
    return {key: carried.get(key, unknown) for key in DATA_KEYS}
