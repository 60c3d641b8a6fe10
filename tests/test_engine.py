"""Engine profiles (FP8 weights and KV cache, the request router, CUDA graphs' fit), the drain
of streaming replicas, and Serve's port-opening switches pinned off (docs/benchmarking.md,
docs/scaling.md, pd_constructs/network/network_policy.py SERVE_SWITCHES)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from pd_constructs.network.network_policy import (
    RAY_PORTS,
    SERVE_SWITCHES,
    render_ray_network_policies,
)
from pd_constructs.serving.workload import (
    PREFIX_ROUTER_CLASS,
    cluster_spec_hash,
    render_rayservice,
    render_serve_config,
)
from ray_pd_eks import instance_types
from ray_pd_eks.config import DEFAULTS, AppConfig, ConfigError, memory_estimate
from tests.test_workload import (
    DEPLOYMENT_CONFIG_FIELDS,
    PREFIX_ROUTER_KWARGS,
    REQUEST_ROUTER_CONFIG_FIELDS,
)

FP8 = {"quantization": "fp8", "kvCacheDtype": "fp8"}
AGGREGATED = {"servingMode": "aggregated"}
# Another model than the default needs a revision of its own (the default is a commit of the
# default model).
OTHER_MODEL = {"modelRevision": "main"}
# One type of each GPU family (a model every one of them holds in float16).
FAMILY_TYPES = {
    "g4dn": "g4dn.8xlarge",
    "g5": "g5.8xlarge",
    "g6": "g6.8xlarge",
    "g6e": "g6e.8xlarge",
    "p4d": "p4d.24xlarge",
    "p4de": "p4de.24xlarge",
    "p5": "p5.48xlarge",
    "p5e": "p5e.48xlarge",
    "p5en": "p5en.48xlarge",
}
SMALL = {"dtype": "float16", "modelSource": "Qwen/Qwen3-4B", "modelRevision": "main"}


def _args(config: AppConfig) -> dict[str, Any]:
    (app,) = render_serve_config(config)["applications"]
    return dict(app["args"])


def _engines(config: AppConfig) -> dict[str, dict[str, Any]]:
    """Deployment name -> its LLMConfig: prefill and decode, or the aggregated engines."""
    args = _args(config)
    if "llm_configs" in args:
        (llm,) = args["llm_configs"]
        return {"engines": llm}
    return {"prefill": args["prefill_config"], "decode": args["decode_config"]}


def _problem(overrides: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        DEFAULTS.with_overrides(overrides)
    return str(err.value)


# -- FP8 only where the GPU has FP8 tensor cores -------------------------------------------


def test_fp8_gpus_are_ada_and_newer() -> None:
    fp8 = {f for f, gpu in instance_types.GPU_FACTS_BY_FAMILY.items() if gpu.fp8}
    assert fp8 == {"g6", "g6e", "p5", "p5e", "p5en"}  # L4, L40S, H100, H200
    for gpu in instance_types.GPU_FACTS_BY_FAMILY.values():
        assert gpu.fp8 == (float(gpu.compute_capability) >= 8.9), gpu.model


@pytest.mark.parametrize("family", sorted(FAMILY_TYPES))
@pytest.mark.parametrize(("key", "off"), [("quantization", "none"), ("kvCacheDtype", "auto")])
def test_fp8_is_accepted_on_fp8_gpus_and_refused_elsewhere_naming_the_gpu(
    family: str, key: str, off: str
) -> None:
    base = {**SMALL, "gpuNodeType": FAMILY_TYPES[family]}
    gpu = instance_types.GPU_FACTS_BY_FAMILY[family]
    if gpu.fp8:
        config = DEFAULTS.with_overrides({**base, key: "fp8"})
        assert getattr(config, "quantization" if key == "quantization" else "kv_cache_dtype")
        return
    line = _problem({**base, key: "fp8"})
    assert f"context key '{key}' = \"fp8\"" in line
    assert f"the {gpu.model} GPU of {FAMILY_TYPES[family]}" in line
    assert f"compute capability {gpu.compute_capability}" in line
    assert f"use {key}={off}" in line
    DEFAULTS.with_overrides({**base, key: off})  # the fix is accepted


@pytest.mark.parametrize(("key", "value"), [("quantization", "int8"), ("kvCacheDtype", "fp8_e5m2")])
def test_other_fp8_values_are_refused(key: str, value: str) -> None:
    assert f"context key '{key}' = \"{value}\": must be" in _problem({key: value})


def test_fit_check_counts_one_byte_per_parameter_with_fp8_weights() -> None:
    # One L4 at 0.90: 22.5 x 0.9 = 20.25 GiB = 21.74e9 bytes.
    edge, past = {"modelParamsBillions": 21.7}, {"modelParamsBillions": 21.8}
    DEFAULTS.with_overrides({**edge, "quantization": "fp8"})
    line = _problem({**past, "quantization": "fp8"})
    assert "21.8 billion parameters (modelParamsBillions) in FP8 need 20.3 GiB" in line
    # Without FP8 the same model needs 2 bytes per parameter: refused.
    assert "in bfloat16 need 40.4 GiB" in _problem(edge)
    # Qwen3-14B (26.1 GiB in bfloat16) needs an L40S, or FP8 on the L4.
    assert "Qwen3-14B" in _problem({**OTHER_MODEL, "modelSource": "Qwen/Qwen3-14B"})
    DEFAULTS.with_overrides({**OTHER_MODEL, "modelSource": "Qwen/Qwen3-14B", "quantization": "fp8"})


@pytest.mark.parametrize(
    "source", ["Qwen/Qwen3-8B-AWQ", "org/Llama-3.1-8B-Instruct-GPTQ-Int4", "org/m-7b-w4a16"]
)
def test_fp8_quantization_of_an_otherwise_quantized_checkpoint_is_refused(source: str) -> None:
    line = _problem({**OTHER_MODEL, "modelSource": source, "quantization": "fp8"})
    assert f"context key 'quantization' = \"fp8\": {source} is already quantized" in line
    assert "use quantization=none" in line
    DEFAULTS.with_overrides({**OTHER_MODEL, "modelSource": source})  # served as the checkpoint says
    # An FP8 checkpoint is FP8 already: the same method, accepted.
    DEFAULTS.with_overrides(
        {**OTHER_MODEL, "modelSource": "Qwen/Qwen3-8B-FP8", "quantization": "fp8"}
    )


@pytest.mark.parametrize("mode", [{}, AGGREGATED])
def test_fp8_reaches_every_engine_and_the_default_renders_neither(mode: dict[str, Any]) -> None:
    for cfg in _engines(DEFAULTS.with_overrides(mode)).values():
        assert not {"quantization", "kv_cache_dtype"} & set(cfg["engine_kwargs"])
    for name, cfg in _engines(DEFAULTS.with_overrides({**mode, **FP8})).items():
        kwargs = cfg["engine_kwargs"]
        assert (kwargs["quantization"], kwargs["kv_cache_dtype"]) == ("fp8", "fp8"), name
    only_kv = _engines(DEFAULTS.with_overrides({**mode, "kvCacheDtype": "fp8"}))
    for cfg in only_kv.values():
        assert cfg["engine_kwargs"]["kv_cache_dtype"] == "fp8"
        assert "quantization" not in cfg["engine_kwargs"]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        FP8,
        {"kvCacheDtype": "fp8", "kvBackend": "UCX"},
        {
            **FP8,
            "requestRouter": "prefix-aware",
            "gpuNodeCount": 4,
            "prefillReplicas": 2,
            "decodeReplicas": 2,
        },
        {"decodeMaxReplicas": 3, "gpuNodeMaxCount": 4, "quantization": "fp8"},
        {"gpuNodeType": "p5.48xlarge", "tensorParallelSize": 8, **FP8, "enforceEager": False},
    ],
)
def test_prefill_and_decode_engines_are_identical_but_for_their_kv_role(
    overrides: dict[str, Any],
) -> None:
    """NIXL moves raw KV blocks: vLLM 0.26's NixlConnector refuses a peer whose model, dtype,
    KV cache dtype or attention backend differ (nixl/metadata.py compute_nixl_compatibility_hash,
    checked at the handshake), and block size and layout must match too
    (_validate_remote_agent_handshake). The two engines differ only in kv_role: prefill
    produces, decode consumes (vLLM 0.26 deprecates kv_both for NixlConnector,
    nixl/connector.py NixlConnector.__init__; both roles are in config/kv_transfer.py KVRole)."""
    engines = _engines(DEFAULTS.with_overrides(overrides))
    prefill, decode = engines["prefill"], engines["decode"]

    def engine_side(cfg: dict[str, Any]) -> dict[str, Any]:
        kwargs = {**cfg["engine_kwargs"]}
        kwargs["kv_transfer_config"] = {**kwargs["kv_transfer_config"], "kv_role": "-"}
        return {
            k: v for k, v in {**cfg, "engine_kwargs": kwargs}.items() if k != "deployment_config"
        }

    assert engine_side(prefill) == engine_side(decode)
    assert prefill["engine_kwargs"]["kv_transfer_config"]["kv_role"] == "kv_producer"
    assert decode["engine_kwargs"]["kv_transfer_config"]["kv_role"] == "kv_consumer"


@pytest.mark.parametrize(
    "overrides", [{}, {"kvBackend": "UCX"}, {"gpuNodeCount": 3, "prefillReplicas": 2}]
)
def test_no_engine_pins_its_nixl_engine_id(overrides: dict[str, Any]) -> None:
    """Ray 2.58 makes the NIXL engine id ``<engine_id or a random suffix>-<host>-<port>``
    (kv_transfer/nixl.py NixlConnectorBackend.setup; base.py _get_unique_suffix). A pinned
    ``engine_id`` gives a prefill engine restarted on the same pod (same IP, same port) the id
    of the dead one, and vLLM 0.26's decode handshakes only with ids it has not seen
    (nixl/pull_worker.py start_load_kv): it would keep reading from the dead agent. Left
    unset, every engine start gets a fresh id."""
    for cfg in _engines(DEFAULTS.with_overrides(overrides)).values():
        assert "engine_id" not in cfg["engine_kwargs"]["kv_transfer_config"]


# -- the request router ---------------------------------------------------------------------


ROUTED = [
    ({"gpuNodeCount": 3, "prefillReplicas": 2}, {"prefill"}),
    ({"gpuNodeCount": 3, "decodeReplicas": 2}, {"decode"}),
    ({"decodeMaxReplicas": 2, "gpuNodeMaxCount": 3}, {"decode"}),
    ({"gpuNodeCount": 4, "prefillReplicas": 2, "decodeReplicas": 2}, {"prefill", "decode"}),
    ({**AGGREGATED}, {"engines"}),
]


@pytest.mark.parametrize(("overrides", "routed"), ROUTED)
def test_prefix_aware_router_goes_on_every_deployment_of_several_replicas(
    overrides: dict[str, Any], routed: set[str]
) -> None:
    config = DEFAULTS.with_overrides({**overrides, "requestRouter": "prefix-aware"})
    assert set(config.routed_deployments) == routed
    for name, cfg in _engines(config).items():
        deployment = cfg["deployment_config"]
        assert set(deployment) <= DEPLOYMENT_CONFIG_FIELDS
        if name not in routed:
            assert "request_router_config" not in deployment, name
            continue
        router = deployment["request_router_config"]
        assert set(router) <= REQUEST_ROUTER_CONFIG_FIELDS
        assert router["request_router_class"] == PREFIX_ROUTER_CLASS
        assert set(router["request_router_kwargs"]) == PREFIX_ROUTER_KWARGS
        assert router["request_router_kwargs"]["do_eviction"] is True
        assert router["request_router_kwargs"]["imbalanced_threshold"] == 16
    # The default router is Serve's own: nothing rendered.
    plain = DEFAULTS.with_overrides(overrides)
    assert "request_router_config" not in yaml.safe_dump(render_serve_config(plain))


def test_router_class_is_the_public_ray_serve_llm_path() -> None:
    module, _, cls = PREFIX_ROUTER_CLASS.partition(":")
    assert (module, cls) == ("ray.serve.llm.request_router", "PrefixCacheAffinityRouter")


def test_prefix_aware_with_one_replica_everywhere_is_refused() -> None:
    line = _problem({"requestRouter": "prefix-aware"})
    assert "context key 'requestRouter' = \"prefix-aware\": has no effect" in line
    assert "prefillReplicas and decodeReplicas (or decodeMaxReplicas) are 1" in line
    assert "use requestRouter=power-of-two" in line
    assert "context key 'requestRouter' = \"kv-aware\": must be power-of-two" in _problem(
        {"requestRouter": "kv-aware"}
    )


def test_only_the_model_name_says_it_is_quantized_not_its_organisation() -> None:
    DEFAULTS.with_overrides(
        {**OTHER_MODEL, "modelSource": "awq-lab/Qwen3-8B", "quantization": "fp8"}
    )


# -- graceful shutdown of the deployments that stream ---------------------------------------


def _drains(config: AppConfig) -> dict[str, Any]:
    args = _args(config)
    out = {"ingress": args["ingress_deployment_config"].get("graceful_shutdown_timeout_s")}
    for name, cfg in _engines(config).items():
        out[name] = cfg["deployment_config"].get("graceful_shutdown_timeout_s")
    return out


def test_decode_and_ingress_drain_for_the_longest_answer_prefill_keeps_serves_default() -> None:
    # 2 s to the first token + 4096 tokens x 0.2 s = 821.2 s, rounded up.
    assert DEFAULTS.longest_answer_seconds == 822
    assert _drains(DEFAULTS) == {"ingress": 822, "prefill": None, "decode": 822}
    assert _drains(DEFAULTS.with_overrides(AGGREGATED)) == {"ingress": 822, "engines": 822}
    scaled = DEFAULTS.with_overrides({"decodeMaxReplicas": 2, "gpuNodeMaxCount": 3})
    assert _drains(scaled)["decode"] == 822
    longer = DEFAULTS.with_overrides({"maxModelLen": 8192, "alarmInterTokenP95Seconds": 0.1})
    assert _drains(longer) == {"ingress": 822, "prefill": None, "decode": 822}  # 2 + 819.2
    given = DEFAULTS.with_overrides({"gracefulShutdownSeconds": 120})
    assert _drains(given) == {"ingress": 120, "prefill": None, "decode": 120}


def test_derived_drain_is_capped_at_an_hour() -> None:
    config = DEFAULTS.with_overrides({"maxModelLen": 131072})
    assert config.longest_answer_seconds == 26217
    assert config.graceful_shutdown_s == 3600
    edge = DEFAULTS.with_overrides({"maxModelLen": 17990})  # 2 + 17990 x 0.2 = 3600
    assert (edge.longest_answer_seconds, edge.graceful_shutdown_s) == (3600, 3600)


def test_drain_and_engine_profile_are_serve_only_changes() -> None:
    """They change serveConfigV2 only: KubeRay applies them in place (no recreate)."""
    base = cluster_spec_hash(DEFAULTS)
    for overrides in (
        {"gracefulShutdownSeconds": 60},
        {"maxModelLen": 8192},
        FP8,
        {"requestRouter": "prefix-aware", "gpuNodeCount": 3, "decodeReplicas": 2},
    ):
        changed = DEFAULTS.with_overrides(overrides)
        if overrides.get("decodeReplicas"):  # a third worker is a cluster change of its own
            assert cluster_spec_hash(changed) == cluster_spec_hash(
                DEFAULTS.with_overrides({"gpuNodeCount": 3, "decodeReplicas": 2})
            )
        else:
            assert cluster_spec_hash(changed) == base, overrides


# -- Serve's port-opening switches, pinned off -----------------------------------------------


def _containers(rs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = rs["spec"]["rayClusterConfig"]
    (head,) = cluster["headGroupSpec"]["template"]["spec"]["containers"]
    (group,) = cluster["workerGroupSpecs"]
    (worker,) = group["template"]["spec"]["containers"]
    return {"head": head, "worker": worker}


@pytest.mark.parametrize(
    "overrides", [{}, AGGREGATED, {"kvBackend": "UCX", "gpuNodeCount": 2}, {**FP8}]
)
def test_every_serve_switch_is_pinned_off_on_head_and_workers(overrides: dict[str, Any]) -> None:
    rs = render_rayservice(DEFAULTS.with_overrides(overrides), image="img:1")
    names = {switch.name for switch in SERVE_SWITCHES}
    assert {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED",
        "RAY_SERVE_ENABLE_HA_PROXY",
        "RAY_SERVE_ENABLE_DIRECT_INGRESS",
        "RAY_SERVE_USE_GRPC_BY_DEFAULT",
        "RAY_SERVE_PROXY_USE_GRPC",
        "RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING",
    } == names
    for role, container in _containers(rs).items():
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert {n: env.get(n) for n in names} == dict.fromkeys(names, "0"), role


def _allowed_ports(config: AppConfig) -> list[tuple[int, int]]:
    out = []
    for policy in render_ray_network_policies(config):
        for rule in policy["spec"].get("ingress") or []:
            for port in rule.get("ports") or []:
                out.append((int(port["port"]), int(port.get("endPort", port["port"]))))
    return out


def test_the_ports_the_switches_would_open_are_neither_pinned_nor_allowed() -> None:
    """The switches and the port table agree: nothing in RAY_PORTS or a NetworkPolicy serves a
    port that only a switched-on mode would listen on (so pinning them off closes nothing that
    is in use, and switching one on would be caught here first)."""
    pinned = {v for v in vars(RAY_PORTS).values() if isinstance(v, int) and v > 1024}
    would_open = [r for switch in SERVE_SWITCHES for r in switch.would_open]
    assert (30000, 31000) in would_open and (40000, 41000) in would_open
    config = DEFAULTS.with_overrides(
        {
            "endpointExposure": "internal",
            "endpointAllowedCidrs": ["10.0.0.0/8"],
            "endpointCertificateArn": "arn:aws:acm:us-west-2:123456789012:certificate/"
            "12345678-1234-1234-1234-123456789012",
        }
    )
    allowed = _allowed_ports(config)
    assert allowed  # the policies do list ports
    for first, last in would_open:
        assert not [p for p in pinned if first <= p <= last], (first, last)
        assert not [a for a in allowed if a[0] <= last and first <= a[1]], (first, last)


# -- the memory estimate --------------------------------------------------------------------


def test_memory_estimate_of_the_default_and_of_fp8() -> None:
    default = memory_estimate(DEFAULTS)
    assert default is not None
    assert (round(default.room_gib, 2), round(default.weights_gib, 2)) == (20.25, 16.76)
    assert default.verdict == "tight"  # 20.25 - 16.76 - 1.5 - 1.0 = 0.99 GiB
    fp8 = memory_estimate(DEFAULTS.with_overrides(FP8))
    assert fp8 is not None
    assert (round(fp8.weights_gib, 2), fp8.verdict) == (8.38, "fit")
    assert "weights 8.4 GiB (FP8)" in fp8.summary() and "KV cache (FP8)" in fp8.summary()
    full = memory_estimate(DEFAULTS.with_overrides({"modelParamsBillions": 10}))
    assert full is not None and full.verdict == "no room"
    assert "CUDA graphs do not fit" in full.summary()
    assert (
        memory_estimate(DEFAULTS.with_overrides({**OTHER_MODEL, "modelSource": "org/no-size"}))
        is None
    )


def test_memory_estimate_counts_every_gpu_of_a_replica() -> None:
    config = DEFAULTS.with_overrides({"gpuNodeType": "g6.12xlarge", "tensorParallelSize": 4})
    estimate = memory_estimate(config)
    assert estimate is not None
    assert estimate.gpu == "4 x L4" and round(estimate.room_gib, 1) == 81.0
    assert round(estimate.kv_eager_gib - estimate.kv_graphs_gib, 1) == 4.0
