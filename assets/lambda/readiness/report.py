"""What a successful check reports: the resource's ``Data`` (the same keys for P/D and an
aggregated app; stack outputs read them), and the physical id that carries them, so that the
Update CloudFormation sends while rolling back can answer with the previous Data at once.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

import checks
import kvproof
from nixl_logs import KvBackendReport
from placement import Placement
from properties import SERVE_PORT, Props

SAMPLE_CHARS = 60
# CloudFormation caps a custom resource response at 4 KiB, Data included.
MAX_DATA_VALUE_CHARS = 200
ROLLBACK_KEY = "ReadinessRollback"  # top-level, so it never leaks into the resource's Data
# Data keys a rollback answer reproduces: every key a successful check returns. ServeService
# derives from the properties; the others travel in the physical id.
DATA_KEYS = (
    "GpuNodes",
    "AppStatus",
    "PrefillNode",
    "DecodeNode",
    "PlacementMethod",
    "Models",
    "CompletionSample",
    "KvBackend",
    "KvProvider",
    "KvTransfer",
    "IntegrityProbe",
    "RayTokenEnforced",
    "ServeService",
)
ID_DATA_KEYS = tuple(k for k in DATA_KEYS if k != "ServeService")
# CloudFormation caps a physical id at 1 KiB and the whole response at 4 KiB; with Data values
# of at most MAX_DATA_VALUE_CHARS each, 700 characters keep the response under that.
MAX_PHYSICAL_ID_CHARS = 700
NOT_RECHECKED = "unknown: not re-checked while the stack rolled back"


def rollback_response(event: Mapping[str, Any]) -> dict[str, Any]:
    """The answer to a rollback Update: the current physical id and the Data of the last
    successful check, decoded from that id, with no Kubernetes call. Keys the id does not
    carry (an id written before it carried Data) say they were not re-checked."""
    current = str(event.get("PhysicalResourceId") or "")
    carried = data_from_physical_id(current)
    properties = event.get("ResourceProperties") or {}
    data = {key: carried.get(key, NOT_RECHECKED) for key in ID_DATA_KEYS}
    data["ServeService"] = (
        f"{properties.get('RayServiceName', '')}-serve-svc.{properties.get('Namespace', '')}"
        f":{SERVE_PORT}"
    )
    return {"PhysicalResourceId": current, "Data": data, ROLLBACK_KEY: "true"}


def base_id(physical_id: str) -> str:
    return physical_id.partition("?")[0]


def physical_id_with_data(base: str, data: Mapping[str, str]) -> str:
    """``<base>?<url-encoded Data>``, at most ``MAX_PHYSICAL_ID_CHARS``: the longest value is
    shortened (ending in "...") until it fits, so the id and the whole response stay within
    CloudFormation's limits whatever the node names or reasons."""
    values = {key: str(data.get(key, "")) for key in ID_DATA_KEYS}
    while True:
        physical_id = f"{base}?{urllib.parse.urlencode(values)}"
        if len(physical_id) <= MAX_PHYSICAL_ID_CHARS:
            return physical_id
        longest = max(values, key=lambda key: len(values[key]))
        if len(values[longest]) <= 3:
            return base
        keep = max(0, len(values[longest]) - max(16, len(physical_id) - MAX_PHYSICAL_ID_CHARS))
        values[longest] = values[longest][: max(0, keep - 3)] + "..."


def data_from_physical_id(physical_id: str) -> dict[str, str]:
    _, _, query = physical_id.partition("?")
    return {k: v for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)}


def aggregated_data(
    props: Props, nodes: Any, state: Any, place: Any, models: list[str], sample: str
) -> dict[str, str]:
    """Data of an aggregated app: the same keys as PD (stack outputs read them), saying that
    there is no prefill/decode split and no KV transfer."""
    engines = (
        ",".join(place.engine_nodes) or f"unknown (worker nodes {' '.join(place.worker_nodes)})"
    )
    data = {
        "GpuNodes": ",".join(f"{n.name}:{n.zone}" for n in nodes.usable),
        "AppStatus": state.app_status or "",
        "PrefillNode": f"aggregated: engines on {engines}",
        "DecodeNode": f"aggregated: engines on {engines}",
        "PlacementMethod": place.method,
        "Models": ",".join(models),
        "CompletionSample": " ".join(sample.split())[:SAMPLE_CHARS],
        "KvBackend": "none (aggregated: no KV transfer)",
        "KvProvider": "none (aggregated: no KV transfer)",
        "KvTransfer": "none (aggregated: no KV transfer)",
        "ServeService": f"{props.serve_service}.{props.namespace}:{SERVE_PORT}",
    }
    return {k: v[:MAX_DATA_VALUE_CHARS] for k, v in data.items()}


def pd_data(
    props: Props,
    nodes: checks.GpuNodes,
    state: checks.RayServiceState,
    place: Placement,
    models: list[str],
    probe: kvproof.ProbeResult,
    verdict: kvproof.KvTransferVerdict,
    kv: KvBackendReport,
    token_enforced: str,
) -> dict[str, str]:
    """Data of a P/D app whose every step passed."""
    if place.method == "serve-replicas":
        prefill_node = ",".join(place.prefill_nodes)
        decode_node = ",".join(place.decode_nodes)
    else:
        prefill_node = decode_node = f"unknown (worker nodes {' '.join(place.worker_nodes)})"
    data = {
        "GpuNodes": ",".join(f"{n.name}:{n.zone}" for n in nodes.usable),
        "AppStatus": state.app_status or "",
        "PrefillNode": prefill_node,
        "DecodeNode": decode_node,
        "PlacementMethod": place.method,
        "Models": ",".join(models),
        "CompletionSample": " ".join(probe.answer.split())[:SAMPLE_CHARS],
        "KvBackend": kv.value(),
        "KvProvider": kv.provider_value(props.kv_backend),
        "KvTransfer": verdict.summary,
        "IntegrityProbe": probe.describe(),
        "RayTokenEnforced": token_enforced,
        "ServeService": f"{props.serve_service}.{props.namespace}:{SERVE_PORT}",
    }
    return {k: v[:MAX_DATA_VALUE_CHARS] for k, v in data.items()}
