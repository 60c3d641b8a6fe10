"""Cold start: image pre-pull, model prefetch, the node cache, S3 staging and the HF token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pd_constructs.serving.model_access import MODEL_CACHE, TOKEN_DIR, prefetch_requirements
from pd_constructs.serving.warmup import WARMUP_NAMESPACE
from pd_constructs.serving.workload import render_rayservice
from tests.conftest import S3_URI, TOKEN_SECRET
from tests.synth import TEST_REGION, Synthesized, image_refs, resolve

REGION = TEST_REGION
IMAGE = f"763104351884.dkr.ecr.{REGION}.amazonaws.com/ray:serve-llm-cuda-v1.0"


def _manifest_resources(app: Synthesized, stack: str) -> dict[str, dict[str, Any]]:
    return app.resources(stack, "Custom::AWSCDK-EKS-KubernetesResource")


def _objects(app: Synthesized, stack: str) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
    """(kind, name) -> (logical id of the resource that applies it, the object)."""
    out = {}
    for logical_id, r in _manifest_resources(app, stack).items():
        for obj in json.loads(resolve(r["Properties"]["Manifest"])):
            out[(obj["kind"], obj["metadata"]["name"])] = (logical_id, obj)
    return out


def _daemon_set(app: Synthesized, name: str) -> dict[str, Any]:
    return _objects(app, "Workload")[("DaemonSet", name)][1]


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj["spec"]["template"]["spec"])


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _workers(app: Synthesized) -> dict[str, Any]:
    rs = _objects(app, "Workload")[("RayService", app.config.ray_service_name)][1]
    (group,) = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return dict(group["template"]["spec"])


def _head(app: Synthesized) -> dict[str, Any]:
    rs = _objects(app, "Workload")[("RayService", app.config.ray_service_name)][1]
    return dict(rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"])


# -- pre-pull -------------------------------------------------------------------------------


def test_image_prepull_targets_system_and_gpu_nodes_and_holds_the_image(
    default_app: Synthesized,
) -> None:
    pod = _pod(_daemon_set(default_app, "image-prepull"))
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {"key": "role", "operator": "In", "values": ["system", "gpu-worker"]}
    ]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    (c,) = pod["containers"]
    # The Ray image by digest, resolved at deploy time (tests/test_images.py).
    assert (c["image"], c["imagePullPolicy"]) == (image_refs(default_app)["Ray"], "IfNotPresent")
    assert c["command"] == ["sleep", "infinity"]
    assert c["resources"]["limits"] == {"memory": "64Mi"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False


def test_warmup_waits_for_nothing_but_the_cluster(default_app: Synthesized) -> None:
    """Created in the workload stack, which deploys beside the GPU node stack, depending on
    neither the system node group nor the operator: applied while the GPU nodes boot."""
    resources = default_app.templates["Workload"]["Resources"]
    objects = _objects(default_app, "Workload")
    ds_id, _ = objects[("DaemonSet", "image-prepull")]
    assert objects[("DaemonSet", "model-prefetch")][0] == ds_id
    ns_id, ns = objects[("Namespace", WARMUP_NAMESPACE)]

    def closure(logical_id: str) -> set[str]:
        seen: set[str] = set()
        todo = [logical_id]
        while todo:
            for dep in resources[todo.pop()].get("DependsOn", []):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    waits_for = {resources[d]["Type"] for d in closure(ds_id)}
    assert "AWS::EKS::Nodegroup" not in waits_for
    assert "Custom::AWSCDK-EKS-HelmChart" not in waits_for
    assert ns_id in closure(ds_id)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # Not after the GPU nodes: the workload stack deploys beside the GPU node stack.
    assert default_app.stage.gpu_nodes not in default_app.stage.workload.dependencies


def test_image_is_pinned_and_pulled_if_not_present_everywhere(default_app: Synthesized) -> None:
    containers = [
        c
        for spec in (_head(default_app), _workers(default_app))
        for c in spec.get("initContainers", []) + spec["containers"]
    ]
    containers += [
        c
        for name in ("image-prepull", "model-prefetch")
        for c in _pod(_daemon_set(default_app, name)).get("initContainers", [])
        + _pod(_daemon_set(default_app, name))["containers"]
    ]
    assert len(containers) == 5
    refs = image_refs(default_app)
    for c in containers:
        assert c["imagePullPolicy"] == "IfNotPresent", c["name"]
        small = c["name"] in ("prefetch-model", "done")
        assert c["image"] == refs["Prefetch" if small else "Ray"], c["name"]


# -- the node's model cache ------------------------------------------------------------------


def test_workers_keep_weights_on_the_nodes_nvme_across_restarts(default_app: Synthesized) -> None:
    spec = _workers(default_app)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["model-cache"]["hostPath"] == {
        "path": "/mnt/k8s-disks/0/ray-pd-eks/model-cache",
        "type": "DirectoryOrCreate",
    }
    (c,) = spec["containers"]
    assert {"name": "model-cache", "mountPath": MODEL_CACHE} in c["volumeMounts"]
    env = _env(c)
    assert env["HF_HOME"] == f"{MODEL_CACHE}/hf"
    assert "HF_HUB_OFFLINE" not in env and "HF_TOKEN_PATH" not in env
    assert spec["initContainers"] == [] and spec["serviceAccountName"] == "default"
    # The page cache of the ~18 GiB checkpoint is charged to the pod: the limit leaves room.
    assert int(c["resources"]["limits"]["memory"].removesuffix("Gi")) >= 2 * 18


def test_prefetch_fills_the_same_cache_from_hugging_face(default_app: Synthesized) -> None:
    pod = _pod(_daemon_set(default_app, "model-prefetch"))
    assert pod["nodeSelector"] == {"role": "gpu-worker"}
    assert pod["serviceAccountName"] == "default"
    assert pod["automountServiceAccountToken"] is False
    (fetch,) = pod["initContainers"]
    # A small Python image, not the ~20 GB Ray image: the download starts beside its pull.
    prefetch_image = image_refs(default_app)["Prefetch"]
    assert fetch["name"] == "prefetch-model" and fetch["image"] == prefetch_image
    assert pod["containers"][0]["image"] == prefetch_image
    env = _env(fetch)
    requirements = env["REQUIREMENTS"].splitlines()
    assert "--require-hashes" in fetch["args"][0] and "--no-deps" in fetch["args"][0]
    assert any(r.startswith("huggingface-hub==") for r in requirements)
    assert env["MODEL_SOURCE"] == "Qwen/Qwen3.5-9B"
    assert env["MODEL_REVISION"] == "c202236235762e1c871ad0ccb60c8ee5ba337b9a"
    assert 'revision=os.environ["MODEL_REVISION"]' in fetch["args"][0]
    assert env["HF_HOME"] == _env(_workers(default_app)["containers"][0])["HF_HOME"]
    # Only the Hugging Face cache of the node cache is mounted, not the directories the
    # workers load vLLM's compile cache (or a staged copy) from.
    assert fetch["volumeMounts"] == [
        {"name": "model-cache", "mountPath": f"{MODEL_CACHE}/hf", "subPath": "hf"}
    ]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert "*.safetensors" in env["ALLOW_PATTERNS"].split(",")
    assert "snapshot_download" in fetch["args"][0]
    (cache,) = pod["volumes"]
    assert cache["hostPath"]["path"] == "/mnt/k8s-disks/0/ray-pd-eks/model-cache"


# hf_xet's download buffer (hf-xet 1.8.0, xet_runtime/src/config/groups/reconstruction.rs):
# SIZE plus PERFILE per active file, at most LIMIT; pinned, not derived from the container's
# memory limit. Byte sizes as hf_xet parses them (decimal gb/mb).
XET_BUFFER = {
    "HF_XET_RECONSTRUCTION_DOWNLOAD_BUFFER_SIZE": "2gb",
    "HF_XET_RECONSTRUCTION_DOWNLOAD_BUFFER_PERFILE_SIZE": "512mb",
    "HF_XET_RECONSTRUCTION_DOWNLOAD_BUFFER_LIMIT": "4gb",
}
XET_PROCESS_OVERHEAD = 0.6e9  # peak RSS over the buffer: 6.6 GB measured with a 6 GB buffer


def _bytes(size: str) -> float:
    units = {"gb": 1e9, "mb": 1e6, "gi": 2**30, "mi": 2**20}
    return float(size[:-2]) * units[size[-2:].lower()]


@pytest.mark.parametrize("app_name", ["default_app", "token_app"])
def test_prefetch_pins_the_xet_buffer_and_sizes_its_memory_limit_for_it(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    """The download rate the timeline models rests on these: a pinned buffer (hf-xet 1.8.0
    would otherwise derive a quarter of the container's limit, 1.07 GB at the old 4Gi), high
    performance mode off, and a memory limit that holds the buffer's ceiling with the
    process's overhead. Requests stay small: they are the pod's for its whole life."""
    app: Synthesized = request.getfixturevalue(app_name)
    (fetch,) = [
        c
        for c in _pod(_daemon_set(app, "model-prefetch"))["initContainers"]
        if c["name"] == "prefetch-model"
    ]
    env = _env(fetch)
    assert {name: env.get(name) for name in XET_BUFFER} == XET_BUFFER
    assert env["HF_XET_HIGH_PERFORMANCE"] == "0"
    assert "max_workers=8" in fetch["args"][0]
    size, perfile, limit = (_bytes(env[name]) for name in XET_BUFFER)
    # A checkpoint of three shards downloads with the whole buffer; a fourth reaches the cap.
    assert size + 3 * perfile <= limit < size + 4 * perfile
    resources = fetch["resources"]
    assert resources == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"memory": "6Gi"},
    }
    memory_limit = _bytes(resources["limits"]["memory"])
    assert limit + XET_PROCESS_OVERHEAD <= memory_limit


def test_without_nvme_the_cache_lives_on_the_root_volume(variant_app: Synthesized) -> None:
    volumes = {v["name"]: v for v in _workers(variant_app)["volumes"]}
    assert volumes["model-cache"]["hostPath"]["path"] == "/var/lib/ray-pd-eks/model-cache"


# -- S3 staging -------------------------------------------------------------------------------


def test_s3_staging_renders_only_when_configured(variant_app: Synthesized) -> None:
    config = variant_app.config
    dest = f"{MODEL_CACHE}/{config.staged_model_dir}"
    spec = _workers(variant_app)
    (stage,) = spec["initContainers"]
    assert stage["image"] == image_refs(variant_app)["AwsCli"]
    assert stage["imagePullPolicy"] == "IfNotPresent"
    env = _env(stage)
    assert (env["MODEL_S3_URI"], env["DEST"], env["SYNC_ARGS"]) == (S3_URI, dest, "")
    assert env["REGION"] == REGION
    assert "aws s3 sync" in stage["args"][0] and ".complete" in stage["args"][0]
    # The owner is checked before the copy: ListObjectsV2 with --expected-bucket-owner
    # (aws s3 sync has no such option), the deploy account unless modelS3BucketOwner says.
    script = stage["args"][0]
    assert script.index("--expected-bucket-owner") < script.index("aws s3 sync")
    assert (env["BUCKET"], env["PREFIX"], env["BUCKET_OWNER"]) == (
        "example-models",
        "qwen/Qwen3.5-9B",
        "",
    )
    assert "sts get-caller-identity" in script
    # It mounts only its own copy's directory of the node cache.
    assert stage["volumeMounts"] == [
        {"name": "model-cache", "mountPath": dest, "subPath": config.staged_model_dir}
    ]
    (worker,) = spec["containers"]
    assert _env(worker)["HF_HUB_OFFLINE"] == "1"
    assert spec["serviceAccountName"] == "model-fetch"
    rs = _objects(variant_app, "Workload")[("RayService", config.ray_service_name)][1]
    serve = rs["spec"]["serveConfigV2"]
    assert f"model_source: {dest}" in serve and "Qwen/Qwen3.5-9B" not in serve
    # The head copies config and tokenizer only, into its own volume at the same path.
    head = _head(variant_app)
    (head_stage,) = head["initContainers"]
    assert "--exclude *.safetensors" in _env(head_stage)["SYNC_ARGS"]
    assert {"name": "model-cache", "emptyDir": {"sizeLimit": "1Gi"}} in head["volumes"]
    # The prefetch stages the same copy on each GPU node, with the AWS CLI image.
    pod = _pod(_daemon_set(variant_app, "model-prefetch"))
    (prefetch,) = pod["initContainers"]
    assert _env(prefetch)["DEST"] == dest and pod["serviceAccountName"] == "model-fetch"
    # Pod Identity brings its own projected token; the API token stays unmounted, and only
    # the AWS init containers get credentials.
    assert pod["automountServiceAccountToken"] is False


def _model_fetch_association(app: Synthesized, namespace: str) -> dict[str, Any]:
    """The Pod Identity association of ``model-fetch`` in ``namespace`` (both are in the
    workload stack; the endpoint's load balancer controller has one of its own there when the
    endpoint is exposed)."""
    (assoc,) = [
        a
        for a in app.resources("Workload", "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "model-fetch"
        and a["Properties"]["Namespace"] == namespace
    ]
    return assoc


def _pod_identity_policies(app: Synthesized, namespace: str) -> list[dict[str, Any]]:
    """The policies of the ``model-fetch`` service account's role in ``namespace``."""
    role = _model_fetch_association(app, namespace)["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    statements = []
    for policy in app.resources("Workload", "AWS::IAM::Policy").values():
        # .get: a policy may name a role of another stack (Fn::ImportValue).
        if {r.get("Ref") for r in policy["Properties"]["Roles"]} == {role}:
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return statements


def test_staging_access_is_read_only_on_exactly_the_prefix(variant_app: Synthesized) -> None:
    for namespace in (WARMUP_NAMESPACE, "inference"):
        assoc = _model_fetch_association(variant_app, namespace)
        assert assoc["Properties"]["ServiceAccount"] == "model-fetch"
        statements = _pod_identity_policies(variant_app, namespace)
        by_action = {s["Action"]: s for s in statements}
        assert set(by_action) == {"s3:GetObject", "s3:ListBucket"}
        get = json.dumps(by_action["s3:GetObject"]["Resource"])
        assert ":s3:::example-models/qwen/Qwen3.5-9B/*" in get
        listing = by_action["s3:ListBucket"]
        # Only while the bucket belongs to this account: a bucket of the same name
        # re-created in another account matches the ARNs but not s3:ResourceAccount.
        owner = {"s3:ResourceAccount": {"Ref": "AWS::AccountId"}}
        assert listing["Condition"] == {
            "StringLike": {"s3:prefix": ["qwen/Qwen3.5-9B/*", "qwen/Qwen3.5-9B"]},
            "StringEquals": owner,
        }
        # Objects are read only while tagged for this app: a changed modelS3Uri cannot read
        # a prefix that nobody marked (listing shows names only).
        tagged = {"s3:ExistingObjectTag/ray-pd-eks:model-access": "true"}
        assert by_action["s3:GetObject"]["Condition"] == {"StringEquals": {**owner, **tagged}}
    addons = variant_app.resources("Cluster", "AWS::EKS::Addon").values()
    assert sorted(a["Properties"]["AddonName"] for a in addons) == [
        "eks-pod-identity-agent",
        "vpc-cni",
    ]


def test_defaults_create_no_aws_identity_for_workload_pods(default_app: Synthesized) -> None:
    """Only aws-node (the VPC CNI add-on's own association, tests/test_vpc_cni.py) and the
    CloudWatch agent (its add-on's, tests/test_observability.py) have one."""
    for stack in ("Cluster", "Workload"):
        assert default_app.resources(stack, "AWS::EKS::PodIdentityAssociation") == {}
    # Pod Identity by default: the VPC CNI's aws-node and the CloudWatch agent (observability),
    # each owned by its add-on; none for model access.
    addons = [
        a
        for stack in default_app.templates
        for a in default_app.resources(stack, "AWS::EKS::Addon").values()
    ]
    associations = [a["Properties"].get("PodIdentityAssociations", []) for a in addons]
    assert sorted(x["ServiceAccount"] for a in associations for x in a) == [
        "aws-node",
        "cloudwatch-agent",
    ]


# -- gated models --------------------------------------------------------------------------


def test_token_reaches_pods_through_a_file_never_a_template(token_app: Synthesized) -> None:
    spec = _workers(token_app)
    (fetch,) = spec["initContainers"]
    assert fetch["name"] == "hf-token" and fetch["image"] == image_refs(token_app)["AwsCli"]
    env = _env(fetch)
    assert env["SECRET_ARN"] == TOKEN_SECRET and env["SECRET_REGION"] == REGION
    assert "get-secret-value" in fetch["args"][0] and f"{TOKEN_DIR}" == env["TOKEN_DIR"]
    (worker,) = spec["containers"]
    assert _env(worker)["HF_TOKEN_PATH"] == f"{TOKEN_DIR}/token"
    assert {"name": "hf-token", "mountPath": TOKEN_DIR, "readOnly": True} in worker["volumeMounts"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["hf-token"]["emptyDir"]["medium"] == "Memory"
    # The head fetches it too (a gated repository's config needs it); the prefetch as well.
    assert [c["name"] for c in _head(token_app)["initContainers"]] == ["hf-token"]
    prefetch = _pod(_daemon_set(token_app, "model-prefetch"))
    assert [c["name"] for c in prefetch["initContainers"]] == ["hf-token", "prefetch-model"]
    assert _env(prefetch["initContainers"][1])["HF_TOKEN_PATH"] == f"{TOKEN_DIR}/token"


def test_token_access_is_read_only_on_exactly_the_secret(token_app: Synthesized) -> None:
    for namespace in (WARMUP_NAMESPACE, "inference"):
        (statement,) = _pod_identity_policies(token_app, namespace)
        assert statement["Action"] == "secretsmanager:GetSecretValue"
        assert statement["Resource"] == TOKEN_SECRET + "-??????"  # partial ARN, documented form
        # Only a secret tagged for this app: a changed hfTokenSecretArn cannot read any other.
        assert statement["Condition"] == {
            "StringEquals": {"secretsmanager:ResourceTag/ray-pd-eks:model-access": "true"}
        }


@pytest.mark.parametrize("app_name", ["default_app", "variant_app", "token_app"])
def test_no_secret_value_in_any_template(app_name: str, request: pytest.FixtureRequest) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    # The endpoint's outputs show how to send a token: the shell variable, never a value.
    text = json.dumps(app.templates).replace('Authorization: Bearer $TOKEN\\"', "")
    for marker in ("hf_", "HF_TOKEN=", "Authorization", "Bearer "):
        assert marker not in text, marker
    assert "secretsmanager:GetSecretValue" not in text or app_name == "token_app"


def test_render_matches_what_the_template_applies(token_app: Synthesized) -> None:
    rs = _objects(token_app, "Workload")[("RayService", "ray-llm")][1]
    refs = image_refs(token_app)
    expected = render_rayservice(
        token_app.config, image=refs["Ray"], region=REGION, aws_cli_image=refs["AwsCli"]
    )
    labels = {k: v for k, v in rs["metadata"]["labels"].items() if "prune" not in k}
    assert {**rs, "metadata": {**rs["metadata"], "labels": labels}} == expected


@pytest.mark.parametrize("app_name", ["default_app", "variant_app", "token_app"])
def test_daemon_set_pod_templates_validate_against_the_kubernetes_pod_schema(
    app_name: str, request: pytest.FixtureRequest, reference_dir: Path
) -> None:
    """The KubeRay CRD embeds the full PodTemplateSpec schema; with unknown fields rejected it
    catches a misspelt or misplaced field in the DaemonSets' pod templates too."""
    from tests.test_workload import crd_validator, validate

    app: Synthesized = request.getfixturevalue(app_name)
    crd = crd_validator(reference_dir)
    # A part of the checked CRD schema, so evolve (no second metaschema check) is enough.
    pod_template = crd.evolve(
        schema=crd.schema["properties"]["spec"]["properties"]["rayClusterConfig"]["properties"][
            "headGroupSpec"
        ]["properties"]["template"]
    )
    for name in ("image-prepull", "model-prefetch"):
        validate(_daemon_set(app, name)["spec"]["template"], pod_template)
    with pytest.raises(jsonschema.ValidationError):
        bad = _daemon_set(app, "image-prepull")["spec"]["template"]
        validate({**bad, "spec": {**bad["spec"], "nodeSelectors": {}}}, pod_template)


def test_prefetch_requirements_pin_every_package_to_a_version_and_a_wheel_hash() -> None:
    lines = prefetch_requirements().splitlines()
    assert len(lines) >= 10
    for line in lines:
        name, _, rest = line.partition("==")
        version, hash_option = rest.split(" ")
        assert name and version and not version.endswith("*"), line
        assert hash_option.startswith("--hash=sha256:") and len(hash_option) == 14 + 64, line
    names = [line.split("==")[0] for line in lines]
    assert len(names) == len(set(names))
    # huggingface_hub's own dependencies are all there (from its wheel's Requires-Dist).
    assert {"huggingface-hub", "filelock", "fsspec", "hf-xet", "packaging", "pyyaml"} <= set(names)
    assert {"tqdm", "typing-extensions", "httpx2"} <= set(names)
