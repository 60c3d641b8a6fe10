"""Workload stack: namespace, KubeRay operator and the prefill/decode RayService."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pd_constructs.common.templates import TemplateError, render
from pd_constructs.network.network_policy import SERVE_SWITCHES
from pd_constructs.serving.workload import llm_configs, render_rayservice, render_serve_config
from ray_pd_eks.config import DEFAULTS, AppConfig
from tests.synth import TEST_REGION, Synthesized, image_refs, resolve

SCHEMAS = Path(__file__).resolve().parent / "schemas"
REGION = TEST_REGION


def _manifests(app: Synthesized) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in app.resources("Workload", "Custom::AWSCDK-EKS-KubernetesResource").values():
        out.extend(json.loads(resolve(r["Properties"]["Manifest"])))
    return out


def _kind(app: Synthesized, kind: str) -> dict[str, Any]:
    """The one object of ``kind`` in the Ray namespace (the workload stack also holds the
    node warm-up's namespace and DaemonSets)."""
    (found,) = [
        m
        for m in _manifests(app)
        if m["kind"] == kind
        and app.config.namespace in (m["metadata"].get("namespace"), m["metadata"]["name"])
    ]
    return found


def _workers(rs: dict[str, Any]) -> dict[str, Any]:
    (group,) = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return dict(group)


def _worker_container(rs: dict[str, Any]) -> dict[str, Any]:
    (c,) = _workers(rs)["template"]["spec"]["containers"]
    return dict(c)


def _serve(rs: dict[str, Any]) -> dict[str, Any]:
    return dict(yaml.safe_load(rs["spec"]["serveConfigV2"]))


# -- the synthesized objects ----------------------------------------------------------------


def test_template_carries_exactly_the_rendered_rayservice(default_app: Synthesized) -> None:
    refs = image_refs(default_app)
    expected = render_rayservice(DEFAULTS, image=refs["Ray"], aws_cli_image=refs["AwsCli"])
    rs = _kind(default_app, "RayService")
    # KubernetesManifest adds its own prune label; everything else must match exactly.
    rs_labels = {k: v for k, v in rs["metadata"]["labels"].items() if "aws.cdk.eks/prune" not in k}
    rs = {**rs, "metadata": {**rs["metadata"], "labels": rs_labels}}
    assert rs == expected


def test_namespace_is_labelled_privileged_for_the_workers_and_warns_at_baseline(
    default_app: Synthesized, variant_app: Synthesized
) -> None:
    labels = _kind(default_app, "Namespace")["metadata"]["labels"]
    assert _kind(default_app, "Namespace")["metadata"]["name"] == "inference"
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"
    # UCX workers are not privileged but still mount the node cache (hostPath): baseline
    # would reject them (tests/test_pod_security.py checks every pod against the level).
    ucx = _kind(variant_app, "Namespace")["metadata"]["labels"]
    assert ucx["pod-security.kubernetes.io/enforce"] == "privileged"


def test_kuberay_operator_chart_pinned_on_system_nodes(default_app: Synthesized) -> None:
    (chart,) = [
        r["Properties"]
        for r in default_app.resources("Workload", "Custom::AWSCDK-EKS-HelmChart").values()
    ]
    # From the vendored chart 1.7.0 (assets/charts/), not from a repository at deploy time.
    assert chart["Release"] == "kuberay-operator"
    assert "Repository" not in chart and "Version" not in chart
    assert ".zip" in json.dumps(chart["ChartAssetURL"])
    assert chart.get("SkipCrds") in (None, False)  # the chart installs the ray.io CRDs
    values = json.loads(chart["Values"])
    assert values["nodeSelector"] == {"role": "system"}
    assert values["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}


@pytest.mark.parametrize("app_name", ["default_app", "variant_app"])
def test_kuberay_operator_has_rights_in_the_ray_namespace_only(
    app_name: str, request: pytest.FixtureRequest, reference_dir: Path
) -> None:
    """No ClusterRole: the chart's Role and RoleBinding in the Ray namespace, and the operator
    started with --watch-namespace <it> (chart 1.7.0 templates; docs/testing.md has the flag)."""
    app: Synthesized = request.getfixturevalue(app_name)
    (chart,) = [
        r["Properties"]
        for r in app.resources("Workload", "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Release"] == "kuberay-operator"
    ]
    values = json.loads(chart["Values"])
    assert values["singleNamespaceInstall"] is True
    assert values["watchNamespace"] == [app.config.namespace]
    # The chart's defaults keep the namespaced Role on (crNamespacedRbacEnable) and RBAC on.
    defaults = yaml.safe_load(
        (reference_dir / "kuberay-v1.7.0/kuberay-operator-values.yaml").read_text()
    )
    assert defaults["singleNamespaceInstall"] is False  # so ours is what turns it on
    assert defaults["rbacEnable"] is True and defaults["crNamespacedRbacEnable"] is True
    assert "rbacEnable" not in values and "crNamespacedRbacEnable" not in values


def test_objects_are_created_in_order_namespace_operator_rayservice(
    default_app: Synthesized,
) -> None:
    resources = default_app.templates["Workload"]["Resources"]

    def find(kind: str) -> str:
        for k, v in resources.items():
            text = json.dumps(v.get("Properties", {}).get("Manifest", "")).replace("\\", "")
            text = text.replace(" ", "")
            if f'"kind":"{kind}"' in text and '"name":"inference"' in text:
                return k
            if kind == "RayService" and f'"kind":"{kind}"' in text:
                return k
        raise AssertionError(kind)

    operator = next(k for k, v in resources.items() if v["Type"] == "Custom::AWSCDK-EKS-HelmChart")
    assert find("Namespace") in resources[operator]["DependsOn"]
    assert operator in resources[find("RayService")]["DependsOn"]


# -- the RayService's settings --------------------------------------------------------------


@pytest.fixture(scope="module")
def rs() -> dict[str, Any]:
    return render_rayservice(DEFAULTS, image=DEFAULTS.image_uri(REGION))


def test_serve_config_is_the_pd_app_of_the_brief(rs: dict[str, Any]) -> None:
    (app,) = _serve(rs)["applications"]
    assert app["name"] == "qwen"
    assert app["import_path"] == "ray.serve.llm:build_pd_openai_app"
    assert app["route_prefix"] == "/"
    assert set(app["args"]) == {"prefill_config", "decode_config", "ingress_deployment_config"}
    # The ingress relays every streamed answer: it drains as long as the longest one takes,
    # maxModelLen 4096 tokens at the 0.2 s inter-token alarm after the 2 s TTFT alarm.
    assert app["args"]["ingress_deployment_config"] == {"graceful_shutdown_timeout_s": 822}
    for phase in ("prefill", "decode"):
        cfg = app["args"][f"{phase}_config"]
        assert cfg == {
            "model_loading_config": {"model_id": "qwen3.5-9b", "model_source": "Qwen/Qwen3.5-9B"},
            "engine_kwargs": {
                "max_model_len": 4096,
                "dtype": "bfloat16",
                "gpu_memory_utilization": 0.9,
                "enforce_eager": True,
                "tensor_parallel_size": 1,
                "kv_transfer_config": {
                    "kv_connector": "NixlConnector",
                    "kv_role": {"prefill": "kv_producer", "decode": "kv_consumer"}[phase],
                    "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
                },
                # modelRevision pins weights, config and tokenizer (vLLM EngineArgs).
                "revision": "c202236235762e1c871ad0ccb60c8ee5ba337b9a",
                "tokenizer_revision": "c202236235762e1c871ad0ccb60c8ee5ba337b9a",
            },
            "placement_group_config": {"bundles": [{"GPU": 1}], "strategy": "STRICT_PACK"},
            # Decode streams the answers (prefill ends with the first token, Serve's 20 s).
            "deployment_config": {"num_replicas": 1}
            | ({"graceful_shutdown_timeout_s": 822} if phase == "decode" else {}),
        }


# Fields Ray Serve LLM 2.58's config models accept where we set them (they reject others).
LLM_CONFIG_FIELDS = {
    "model_loading_config",
    "engine_kwargs",
    "deployment_config",
    "llm_engine",
    "accelerator_type",
    "runtime_env",
    "lora_config",
    "log_engine_metrics",
    "placement_group_config",
    "experimental_configs",
}
MODEL_LOADING_FIELDS = {"model_id", "model_source", "tokenizer_source"}
# Ray 2.58 PDServingArgs (ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py),
# without the deprecated proxy fields it accepts and ignores.
PD_SERVING_ARGS_FIELDS = {
    "prefill_config",
    "decode_config",
    "ingress_cls_config",
    "ingress_deployment_config",
}
# Ray Serve 2.58's DeploymentConfig (ray/serve/_private/config.py), which LLMConfig validates
# deployment_config with (core/configs/llm_config.py validate_deployment_config): the fields
# a deployment_config may set, and RequestRouterConfig's (ray/serve/config.py).
DEPLOYMENT_CONFIG_FIELDS = {
    "num_replicas",
    "max_ongoing_requests",
    "max_queued_requests",
    "backpressure_config",
    "user_config",
    "graceful_shutdown_timeout_s",
    "graceful_shutdown_wait_loop_s",
    "health_check_period_s",
    "health_check_timeout_s",
    "autoscaling_config",
    "request_router_config",
    "logging_config",
    "max_constructor_retry_count",
    "rolling_update_percentage",
}
REQUEST_ROUTER_CONFIG_FIELDS = {
    "request_router_class",
    "request_router_kwargs",
    "request_routing_stats_period_s",
    "request_routing_stats_timeout_s",
    "initial_backoff_s",
    "backoff_multiplier",
    "max_backoff_s",
}
# PrefixCacheAffinityRouter.initialize_state's keywords (Ray 2.58,
# ray/llm/_internal/serve/routing_policies/prefix_aware/prefix_aware_router.py).
PREFIX_ROUTER_KWARGS = {
    "imbalanced_threshold",
    "match_rate_threshold",
    "do_eviction",
    "eviction_threshold_chars",
    "eviction_target_chars",
    "eviction_interval_secs",
}


def test_serve_config_uses_only_fields_ray_serve_llm_accepts(rs: dict[str, Any]) -> None:
    (app,) = _serve(rs)["applications"]
    assert set(app) <= {"name", "import_path", "route_prefix", "args", "runtime_env"}
    assert set(app["args"]) <= PD_SERVING_ARGS_FIELDS
    for phase in ("prefill", "decode"):
        cfg = app["args"][f"{phase}_config"]
        assert set(cfg) <= LLM_CONFIG_FIELDS
        assert set(cfg["model_loading_config"]) <= MODEL_LOADING_FIELDS
        assert set(cfg["deployment_config"]) <= DEPLOYMENT_CONFIG_FIELDS
    assert set(app["args"]["ingress_deployment_config"]) <= DEPLOYMENT_CONFIG_FIELDS


# Ray Serve LLM 2.58's LLMServingArgs (ray/llm/_internal/serve/core/ingress/builder.py), the
# model build_openai_app validates its args with; each entry of llm_configs is an LLMConfig.
LLM_SERVING_ARGS_FIELDS = {"llm_configs", "ingress_cls_config", "ingress_deployment_config"}
AGGREGATED = DEFAULTS.with_overrides({"servingMode": "aggregated"})


def test_aggregated_app_serves_the_same_engine_without_kv_transfer() -> None:
    (pd_app,) = render_serve_config(DEFAULTS)["applications"]
    (app,) = render_serve_config(AGGREGATED)["applications"]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    assert (app["name"], app["route_prefix"]) == ("qwen", "/")
    assert set(app["args"]) == {"llm_configs", "ingress_deployment_config"}
    assert set(app["args"]) <= LLM_SERVING_ARGS_FIELDS
    assert app["args"]["ingress_deployment_config"] == {"graceful_shutdown_timeout_s": 822}
    (llm,) = app["args"]["llm_configs"]
    assert set(llm) <= LLM_CONFIG_FIELDS
    assert set(llm["model_loading_config"]) <= MODEL_LOADING_FIELDS
    assert set(llm["deployment_config"]) <= DEPLOYMENT_CONFIG_FIELDS
    # Same model and engine settings as either PD phase, minus the KV connector.
    prefill = pd_app["args"]["prefill_config"]
    engine = {k: v for k, v in prefill["engine_kwargs"].items() if k != "kv_transfer_config"}
    assert llm["model_loading_config"] == prefill["model_loading_config"]
    assert llm["engine_kwargs"] == engine
    assert "kv_transfer_config" not in json.dumps(app)
    # One engine per GPU worker pod, i.e. per GPU node: prefill + decode replicas; each
    # streams its own answers.
    assert llm["deployment_config"] == {"num_replicas": 2, "graceful_shutdown_timeout_s": 822}


def test_aggregated_replicas_fill_the_same_gpu_nodes() -> None:
    config = AGGREGATED.with_overrides(
        {"gpuNodeCount": 5, "prefillReplicas": 2, "decodeReplicas": 3}
    )
    rs = render_rayservice(config, image="img:1")
    (app,) = _serve(rs)["applications"]
    assert app["args"]["llm_configs"][0]["deployment_config"]["num_replicas"] == 5
    assert _workers(rs)["replicas"] == 5
    changed = AGGREGATED.with_overrides({"maxModelLen": 8192, "enforceEager": False})
    (app,) = render_serve_config(changed)["applications"]
    engine = app["args"]["llm_configs"][0]["engine_kwargs"]
    assert (engine["max_model_len"], engine["enforce_eager"]) == (8192, False)


def test_aggregated_workers_need_neither_efa_nor_privilege() -> None:
    rs = render_rayservice(AGGREGATED, image="img:1")
    c = _worker_container(rs)
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert c["resources"]["limits"] == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 1}
    env = {e["name"] for e in c["env"]}
    # No NIXL/EFA/UCX knobs.
    assert env == {
        "VLLM_HOST_IP",
        "HF_HOME",
        "VLLM_CACHE_ROOT",
        "RAY_metric_cardinality_level",
        "TZ",
        *(switch.name for switch in SERVE_SWITCHES),
    }
    from pd_constructs.serving.workload import render_namespace

    labels = render_namespace(AGGREGATED)["metadata"]["labels"]
    # Not privileged, but the node cache is a hostPath: baseline would reject the workers.
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_synthesized_aggregated_app_is_the_rendered_one(token_app: Synthesized) -> None:
    rs = _kind(token_app, "RayService")
    (app,) = _serve(rs)["applications"]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    assert app == render_serve_config(token_app.config)["applications"][0]
    assert "kv_transfer_config" not in rs["spec"]["serveConfigV2"]


def test_pd_default_is_unchanged_by_the_aggregated_template() -> None:
    (app,) = render_serve_config(DEFAULTS.with_overrides({"servingMode": "pd"}))["applications"]
    assert app["import_path"] == "ray.serve.llm:build_pd_openai_app"
    assert render_serve_config(DEFAULTS) == render_serve_config(
        DEFAULTS.with_overrides({"servingMode": "pd"})
    )


def test_config_changes_flow_into_both_phases() -> None:
    config = DEFAULTS.with_overrides(
        {
            "maxModelLen": 8192,
            "dtype": "float16",
            "gpuMemoryUtilization": 0.8,
            "enforceEager": False,
        }
    )
    (app,) = render_serve_config(config)["applications"]
    for cfg in (app["args"]["prefill_config"], app["args"]["decode_config"]):
        assert cfg["engine_kwargs"]["max_model_len"] == 8192
        assert cfg["engine_kwargs"]["dtype"] == "float16"
        assert cfg["engine_kwargs"]["gpu_memory_utilization"] == 0.8
        assert cfg["engine_kwargs"]["enforce_eager"] is False


def test_cluster_config_head_is_cpu_only_on_system_nodes(rs: dict[str, Any]) -> None:
    cluster = rs["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == "2.58.0"
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    assert head["template"]["spec"]["nodeSelector"] == {"role": "system"}
    (c,) = head["template"]["spec"]["containers"]
    assert c["image"] == "763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0"
    assert sorted(p["containerPort"] for p in c["ports"]) == [6379, 8000, 8080, 8265]
    # m7i.xlarge: 4 vCPU / 16 GiB; the head takes half, leaving room for KubeRay and add-ons.
    assert c["resources"] == {
        "requests": {"cpu": "2", "memory": "8Gi"},
        "limits": {"cpu": "2", "memory": "8Gi"},
    }


def test_upgrade_strategy_cannot_deadlock_a_fixed_gpu_pool(rs: dict[str, Any]) -> None:
    assert rs["spec"]["upgradeStrategy"] == {"type": "None"}


def test_gpu_workers(rs: dict[str, Any]) -> None:
    group = _workers(rs)
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 2)
    spec = group["template"]["spec"]
    assert spec["nodeSelector"] == {"role": "gpu-worker"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    c = _worker_container(rs)
    # With EFA, privileged by default: libfabric's fi_mr_reg pins GPU memory for RDMA.
    assert c["securityContext"] == {"privileged": True}
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    expected = {
        "cpu": "16",
        "memory": "64Gi",
        "nvidia.com/gpu": 1,
        "vpc.amazonaws.com/efa": 1,
    }
    assert c["resources"] == {"requests": expected, "limits": expected}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env == {
        "VLLM_HOST_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "VLLM_SSM_CONV_STATE_LAYOUT": "DS",
        "HF_HOME": "/data/model-cache/hf",
        "VLLM_CACHE_ROOT": "/data/model-cache/vllm",
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600",
        "RAY_metric_cardinality_level": "low",
        "TZ": "UTC",
        **{switch.name: "0" for switch in SERVE_SWITCHES},
        "FI_PROVIDER": "efa",
        # NIXL's C++ default level is WARN; its "Discovered <n> EFA devices" line is INFO.
        "NIXL_LOG_LEVEL": "INFO",
    }
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"dshm": "/dev/shm", "model-cache": "/data/model-cache"}


def test_worker_memory_is_far_above_the_checkpoint_on_every_supported_gpu_type() -> None:
    from ray_pd_eks.instance_types import EFA_GPU_TYPES

    # A model every GPU of the table holds in float16 (see tests/test_gpu_types.py).
    fits_all = {"dtype": "float16", "modelSource": "Qwen/Qwen3-4B", "modelRevision": "main"}
    for name in EFA_GPU_TYPES:
        config = DEFAULTS.with_overrides({**fits_all, "gpuNodeType": name})
        c = _worker_container(render_rayservice(config, image="img:1"))
        assert int(c["resources"]["limits"]["memory"].removesuffix("Gi")) >= 32, name


def test_one_worker_per_node_so_prefill_and_decode_never_share(rs: dict[str, Any]) -> None:
    spec = _workers(rs)["template"]
    labels = spec["metadata"]["labels"]
    (term,) = spec["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()


def test_replica_arithmetic() -> None:
    config = DEFAULTS.with_overrides({"gpuNodeCount": 5, "prefillReplicas": 2, "decodeReplicas": 3})
    rs = render_rayservice(config, image="img:1")
    assert _workers(rs)["replicas"] == 5
    (app,) = _serve(rs)["applications"]
    assert app["args"]["prefill_config"]["deployment_config"] == {"num_replicas": 2}
    assert app["args"]["decode_config"]["deployment_config"]["num_replicas"] == 3


def test_ucx_variant_renders_the_tcp_fallback(variant_app: Synthesized) -> None:
    rs = _kind(variant_app, "RayService")
    (app,) = _serve(rs)["applications"]
    for cfg in (app["args"]["prefill_config"], app["args"]["decode_config"]):
        extra = cfg["engine_kwargs"]["kv_transfer_config"]["kv_connector_extra_config"]
        assert extra == {"backends": ["UCX"]}
    c = _worker_container(rs)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert "FI_PROVIDER" not in env and env["UCX_TLS"] == "tcp,cuda_copy"
    assert "NIXL_LOG_LEVEL" not in env
    assert env["UCX_TCP_PORT_RANGE"] == "5700-5799"
    assert "vpc.amazonaws.com/efa" not in c["resources"]["limits"]
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert _workers(rs)["replicas"] == 3  # 1 prefill + 2 decode


def test_custom_image_is_used_verbatim() -> None:
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/my/ray:1.2"
    config = DEFAULTS.with_overrides({"dlcImage": image})
    assert (
        _worker_container(render_rayservice(config, image=config.image_uri("x")))["image"] == image
    )


# -- schema checks ---------------------------------------------------------------------------


def _close_objects(schema: Any) -> Any:
    """Reject unknown fields the way the API server's pruning drops them: every object schema
    that lists ``properties`` gets ``additionalProperties: false``."""
    if isinstance(schema, dict):
        schema = {k: _close_objects(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_close_objects(s) for s in schema]
    return schema


@functools.cache
def rayservice_crd_schema(reference_dir: Path) -> dict[str, Any]:
    """The pinned RayService CRD's v1 schema as published, parsed once per session (1 MB of
    YAML, a third of a second); callers must not change it."""
    text = (reference_dir / "kuberay-v1.7.0" / "ray.io_rayservices.yaml").read_text()
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return dict(v1["schema"]["openAPIV3Schema"])


@functools.cache
def _crd_schema(reference_dir: Path) -> dict[str, Any]:
    return dict(_close_objects(rayservice_crd_schema(reference_dir)))


@functools.cache
def crd_validator(reference_dir: Path) -> Any:
    """The CRD's schema checked against its metaschema and compiled once per session
    (``jsonschema.validate`` redoes both on every call: about a second for this 1 MB schema)."""
    schema = _crd_schema(reference_dir)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate(instance: Any, validator: Any) -> None:
    """``jsonschema.validate`` with a compiled validator: raises the most relevant error."""
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise error


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"kvBackend": "UCX", "gpuNodeCount": 3},
        {"gpuNodeType": "p5.48xlarge"},
        {"modelS3Uri": "s3://models/qwen/Qwen3.5-9B", "gpuLocalStorage": "none"},
        {"hfTokenSecretArn": "arn:aws:secretsmanager:us-west-2:123456789012:secret:hf-AbCdEf"},
        {"servingMode": "aggregated", "gpuNodeCount": 3, "decodeReplicas": 2},
        {"decodeMaxReplicas": 3, "gpuNodeMaxCount": 4},
        {"gpuWorkerPrivileged": False},
        {"gpuNodeType": "p5.48xlarge", "tensorParallelSize": 8},
    ],
)
def test_rayservice_validates_against_the_kuberay_1_7_crd(
    reference_dir: Path, overrides: dict[str, Any]
) -> None:
    config = DEFAULTS.with_overrides(overrides)
    manifest = render_rayservice(config, image=config.image_uri(REGION), region=REGION)
    validate(manifest, crd_validator(reference_dir))


def test_crd_check_rejects_an_unknown_field(reference_dir: Path, rs: dict[str, Any]) -> None:
    bad = copy.deepcopy(rs)
    bad["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["gpuCount"] = 1
    with pytest.raises(jsonschema.ValidationError, match="gpuCount"):
        validate(bad, crd_validator(reference_dir))


def _status_validator(reference_dir: Path) -> Any:
    """The CRD's status schema: a part of the checked one, so no second metaschema check
    (``jsonschema.validate`` made one per call, a tenth of a second each)."""
    crd = crd_validator(reference_dir)
    return crd.evolve(schema=crd.schema["properties"]["status"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"ready": None, "app_status": None},
        {"ready": False, "app_status": "DEPLOYING"},
        {"ready": True, "app_status": "UNHEALTHY", "app_message": "The deployments [] are ..."},
        {"ready": False, "ready_reason": "InitializingTimeout", "app_status": "DEPLOY_FAILED"},
        {"generation": 2, "observed_generation": 1},
    ],
)
def test_the_fake_rayservice_status_uses_only_kuberay_1_7_fields(
    reference_dir: Path, kwargs: dict[str, Any]
) -> None:
    """The readiness tests' fake RayService (tests/fakes/kube_api.py) is what KubeRay v1.7
    can write: every field is in the CRD's ray.io/v1 schema, so a handler rule keyed on a field
    KubeRay never reports cannot pass its tests."""
    from tests.fakes.kube_api import make_rayservice

    status = make_rayservice(**kwargs)["status"]
    validate(status, _status_validator(reference_dir))


def test_the_v1_app_status_has_no_health_timestamp(reference_dir: Path) -> None:
    """``healthLastUpdateTime`` is in the CRD only under the deprecated v1alpha1; the v1 app
    status KubeRay 1.7 writes (apis/ray/v1/rayservice_types.go AppStatus) has no timestamp."""
    from tests.fakes.kube_api import make_rayservice

    status = make_rayservice(app_status="UNHEALTHY")["status"]
    status["activeServiceStatus"]["applicationStatuses"]["qwen"]["healthLastUpdateTime"] = (
        "2026-11-30T18:00:00Z"
    )
    with pytest.raises(jsonschema.ValidationError, match="healthLastUpdateTime"):
        validate(status, _status_validator(reference_dir))


def test_rayservice_has_the_fields_we_rely_on(rs: dict[str, Any]) -> None:
    schema = json.loads((SCHEMAS / "rayservice-fields.schema.json").read_text())
    jsonschema.validate(rs, schema)
    broken = copy.deepcopy(rs)
    broken["metadata"]["name"] = "x" * 48
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_our_helm_values_use_only_keys_the_charts_know(reference_dir: Path) -> None:
    from pd_constructs.common.helm import EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN, kuberay_operator
    from pd_constructs.serving.workload import kuberay_operator_overrides

    def unknown(ours: Any, ref: Any, prefix: str = "") -> set[str]:
        """Keys of ours missing from the chart's values; free-form maps (``{}`` in the chart,
        such as nodeSelector) and resources are not descended into."""
        out = set()
        for k, v in ours.items():
            if k not in ref:
                out.add(prefix + k)
            elif isinstance(v, dict) and isinstance(ref[k], dict) and ref[k] and k != "resources":
                out |= unknown(v, ref[k], prefix + k + ".")
        return out

    pairs = [
        (EFA_DEVICE_PLUGIN, "charts/aws-efa-k8s-device-plugin-values.v0.5.30.yaml"),
        (NVIDIA_DEVICE_PLUGIN, "charts/nvidia-device-plugin-values.v0.20.0.yaml"),
        (kuberay_operator("1.7.0"), "kuberay-v1.7.0/kuberay-operator-values.yaml"),
    ]
    for release, reference in pairs:
        ref = yaml.safe_load((reference_dir / reference).read_text())
        assert not unknown(release.values(), ref), release.chart
    # With the overrides from code: watchNamespace is the one key the KubeRay chart's values.yaml
    # has only as a comment (`# watchNamespace:`), read by templates/deployment.yaml and
    # multiple_namespaces_role.yaml at v1.7.0.
    ref = yaml.safe_load((reference_dir / pairs[2][1]).read_text())
    merged = kuberay_operator("1.7.0").values(kuberay_operator_overrides(DEFAULTS))
    assert unknown(merged, ref) == {"watchNamespace"}
    assert "# watchNamespace:" in (reference_dir / pairs[2][1]).read_text()


def test_efa_gpu_types_are_ones_the_efa_plugin_supports(reference_dir: Path) -> None:
    from ray_pd_eks.instance_types import EFA_GPU_TYPES

    values = yaml.safe_load(
        (reference_dir / "charts/aws-efa-k8s-device-plugin-values.v0.5.30.yaml").read_text()
    )
    supported = set(values["supportedInstanceLabels"]["values"])
    assert set(EFA_GPU_TYPES) <= supported, set(EFA_GPU_TYPES) - supported


# -- templates ------------------------------------------------------------------------------


def test_template_placeholder_set_is_closed_both_ways() -> None:
    values = {"NAMESPACE": "x", "PSA_ENFORCE": "baseline"}
    with pytest.raises(TemplateError, match=r"without a value: \['PSA_ENFORCE'\]"):
        render("manifests/namespace.yaml", {"NAMESPACE": "x"})
    with pytest.raises(TemplateError, match=r"without a placeholder: \['EXTRA'\]"):
        render("manifests/namespace.yaml", {**values, "EXTRA": 1})
    assert render("manifests/namespace.yaml", values)["metadata"]["name"] == "x"


def test_application_name_is_shared_with_the_serve_config() -> None:
    config = AppConfig.from_context(
        {"modelId": "mistral-7b", "modelSource": "mistralai/M-7B", "modelRevision": "main"}
    )
    (app,) = render_serve_config(config)["applications"]
    assert app["name"] == config.application_name == "mistral"


def test_the_checks_tell_the_modes_apart_on_the_rendered_rayservice() -> None:
    # checks.serving_mode searches serveConfigV2's text (the Lambda has no YAML parser): it must
    # read the YAML this app renders for both modes.
    from ray_pd_eks import lambda_code

    checks = lambda_code.checks()
    assert checks.serving_mode(render_rayservice(DEFAULTS, image="img:1")) == "pd"
    assert checks.serving_mode(render_rayservice(AGGREGATED, image="img:1")) == "aggregated"


# -- pod security: what the head and the workers may do on their nodes ------------------------


def test_with_efa_the_gpu_workers_run_privileged_by_default() -> None:
    """What every public EFA + NIXL deployment runs (the walkthrough: IPC_LOCK alone was not
    enough; NVIDIA Dynamo's EFA disaggregation test and recipe: fi_mr_reg needs it)."""
    assert DEFAULTS.gpu_worker_privileged and DEFAULTS.uses_efa_transport
    c = _worker_container(render_rayservice(DEFAULTS, image="img:1"))
    assert c["securityContext"] == {"privileged": True}


def test_the_unprivileged_efa_worker_is_an_explicit_opt_in() -> None:
    config = DEFAULTS.with_overrides({"gpuWorkerPrivileged": False})
    c = _worker_container(render_rayservice(config, image="img:1"))
    # Every capability dropped but IPC_LOCK (libfabric pins the memory it registers).
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
    }


@pytest.mark.parametrize(
    "overrides",
    [{"kvBackend": "UCX"}, {"servingMode": "aggregated", "gpuNodeCount": 3, "decodeReplicas": 2}],
)
def test_without_efa_the_gpu_workers_never_run_privileged(overrides: dict[str, Any]) -> None:
    """Only registering GPU memory with the EFA NIC needs it: gpuWorkerPrivileged (on by
    default) leaves the UCX and aggregated workers unprivileged."""
    config = DEFAULTS.with_overrides(overrides)
    assert config.gpu_worker_privileged and not config.workers_privileged
    c = _worker_container(render_rayservice(config, image="img:1"))
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_the_head_drops_every_capability_under_runtime_default_seccomp(
    rs: dict[str, Any],
) -> None:
    head = rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert head["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    (ray,) = head["containers"]
    assert ray["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


# -- modelRevision ------------------------------------------------------------------------------


def test_model_revision_pins_every_engine_of_both_modes() -> None:
    config = DEFAULTS.with_overrides({"modelRevision": "0123abcd" * 5})
    for mode in ("pd", "aggregated"):
        serve = render_serve_config(config.with_overrides({"servingMode": mode}))
        engines = llm_configs(serve)
        assert len(engines) == (2 if mode == "pd" else 1)
        for engine in engines:
            kwargs = engine["engine_kwargs"]
            assert kwargs["revision"] == kwargs["tokenizer_revision"] == "0123abcd" * 5


def test_a_staged_copy_loads_without_a_revision() -> None:
    """The engines load a local directory then, which has no revisions to pin."""
    staged = DEFAULTS.with_overrides({"modelS3Uri": "s3://models/qwen/Qwen3.5-9B"})
    for engine in llm_configs(render_serve_config(staged)):
        assert "revision" not in engine["engine_kwargs"]
        assert "tokenizer_revision" not in engine["engine_kwargs"]
