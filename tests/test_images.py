"""One image, the same on every node: every pod references its image by digest, resolved at
deploy time (handler: assets/lambda/image_digest/), sticky until the configured image changes."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from pd_constructs.serving.images import ecr_repository_arn
from tests.lambda_handlers import load
from tests.synth import Synthesized, image_refs, resolve

RAY = "763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0"
CLI = "public.ecr.aws/aws-cli/aws-cli:2.37.1"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
D3 = "sha256:" + "3" * 64
STACK_ID = "arn:aws:cloudformation:us-west-2:123456789012:stack/RayPdEks-Workload/abc"


handler = load("image_digest", "image_digest_handler")


def _ecr(digest: str = D1, tag: str = "serve-llm-cuda-v1.0", found: bool = True) -> Any:
    client = boto3.client("ecr", region_name="us-west-2")
    stub = Stubber(client)
    response: dict[str, Any] = {"images": [], "failures": []}
    if found:
        response["images"] = [
            {
                "registryId": "763104351884",
                "repositoryName": "ray",
                "imageId": {"imageDigest": digest, "imageTag": tag},
                "imageManifest": "{}",
                "imageManifestMediaType": "application/vnd.oci.image.index.v1+json",
            }
        ]
    else:
        response["failures"] = [
            {
                "imageId": {"imageTag": tag},
                "failureCode": "ImageTagDoesNotMatchDigest",
                "failureReason": "Requested image not found",
            }
        ]
    stub.add_response(
        "batch_get_image",
        response,
        {
            "registryId": "763104351884",
            "repositoryName": "ray",
            "imageIds": [{"imageTag": tag}],
            "acceptedMediaTypes": list(handler.MEDIA_TYPES),
        },
    )
    stub.activate()
    return client


class Registry:
    """A registry speaking the OCI distribution API with an anonymous bearer-token challenge,
    as ECR Public does (``/token`` realm, ``Docker-Content-Digest`` on HEAD)."""

    def __init__(self, digests: dict[str, str]) -> None:
        self.digests = digests  # "path:tag" -> digest
        self.calls: list[tuple[str, str, dict[str, str]]] = []

    def __call__(
        self, method: str, url: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        self.calls.append((method, url, dict(headers)))
        if url.startswith("https://public.ecr.aws/token/"):
            assert "scope=repository%3Aaws-cli%2Faws-cli%3Apull" in url
            return 200, {}, json.dumps({"token": "anon-token"}).encode()
        path, _, tag = url.removeprefix("https://public.ecr.aws/v2/").partition("/manifests/")
        if headers.get("Authorization") != "Bearer anon-token":
            challenge = 'Bearer realm="https://public.ecr.aws/token/",service="public.ecr.aws"'
            return 401, {"www-authenticate": challenge}, b""
        digest = self.digests.get(f"{path}:{tag}")
        if digest is None:
            return 404, {}, b""
        return 200, {"docker-content-digest": digest}, b""


def _no_call(*_: Any) -> Any:
    raise AssertionError("no registry call expected")


def _event(request: str, props: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "RequestType": request,
        "StackId": STACK_ID,
        "ResourceProperties": {"ServiceToken": "arn:aws:lambda:x", **props},
        **extra,
    }


def test_a_tag_in_ecr_resolves_to_the_digest_of_what_it_names() -> None:
    out = handler.on_event(
        _event("Create", {"Ray": RAY}), None, ecr_factory=lambda region: _ecr(), http=_no_call
    )
    pinned = f"763104351884.dkr.ecr.us-west-2.amazonaws.com/ray@{D1}"
    assert out == {"PhysicalResourceId": f"Ray={D1}", "Data": {"Ray": pinned}}


def test_a_public_registry_is_asked_anonymously_with_the_token_its_challenge_names() -> None:
    registry = Registry({"aws-cli/aws-cli:2.37.1": D2})
    out = handler.on_event(
        _event("Create", {"AwsCli": CLI}), None, ecr_factory=_no_call, http=registry
    )
    assert out["Data"] == {"AwsCli": f"public.ecr.aws/aws-cli/aws-cli@{D2}"}
    methods = [(m, url.split("?")[0]) for m, url, _ in registry.calls]
    manifest = "https://public.ecr.aws/v2/aws-cli/aws-cli/manifests/2.37.1"
    assert methods == [
        ("HEAD", manifest),
        ("GET", "https://public.ecr.aws/token/"),
        ("HEAD", manifest),
    ]
    accept = registry.calls[-1][2]["Accept"]
    assert accept.startswith("application/vnd.oci.image.index.v1+json")


def test_a_reference_given_by_digest_is_used_as_it_is() -> None:
    given = f"{RAY.rsplit(':', 1)[0]}@{D3}"
    out = handler.on_event(
        _event("Create", {"Ray": given}), None, ecr_factory=_no_call, http=_no_call
    )
    assert out["Data"] == {"Ray": given} and out["PhysicalResourceId"] == f"Ray={D3}"


def test_update_keeps_the_digest_while_the_configured_image_is_unchanged() -> None:
    event = _event(
        "Update",
        {"Ray": RAY, "AwsCli": CLI},
        OldResourceProperties={"ServiceToken": "x", "Ray": RAY, "AwsCli": CLI},
        PhysicalResourceId=f"AwsCli={D2};Ray={D1}",
    )
    cfn = _cloudformation("UPDATE_IN_PROGRESS")
    out = handler.on_event(event, None, ecr_factory=_no_call, http=_no_call, cloudformation=cfn)
    assert out["PhysicalResourceId"] == f"AwsCli={D2};Ray={D1}"
    assert out["Data"]["Ray"].endswith(f"/ray@{D1}")


def test_update_resolves_a_changed_image_again_and_keeps_the_others() -> None:
    new_cli = "public.ecr.aws/aws-cli/aws-cli:2.38.0"
    event = _event(
        "Update",
        {"Ray": RAY, "AwsCli": new_cli},
        OldResourceProperties={"ServiceToken": "x", "Ray": RAY, "AwsCli": CLI},
        PhysicalResourceId=f"AwsCli={D2};Ray={D1}",
    )
    registry = Registry({"aws-cli/aws-cli:2.38.0": D3})
    cfn = _cloudformation("UPDATE_IN_PROGRESS")
    out = handler.on_event(event, None, ecr_factory=_no_call, http=registry, cloudformation=cfn)
    assert out["PhysicalResourceId"] == f"AwsCli={D3};Ray={D1}"
    assert out["Data"]["AwsCli"] == f"public.ecr.aws/aws-cli/aws-cli@{D3}"


def _cloudformation(status: str) -> Any:
    client = boto3.client("cloudformation", region_name="us-west-2")
    stub = Stubber(client)
    stub.add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": "RayPdEks-Workload",
                    "StackId": STACK_ID,
                    "CreationTime": "2026-11-30T10:00:00Z",
                    "StackStatus": status,
                }
            ]
        },
        {"StackName": STACK_ID},
    )
    stub.activate()
    return client


def test_a_rollback_update_answers_from_the_physical_id_without_a_registry_call() -> None:
    event = _event(
        "Update",
        {"Ray": RAY},
        OldResourceProperties={"ServiceToken": "x", "Ray": RAY.replace("v1.0", "v1.1")},
        PhysicalResourceId=f"Ray={D1}",
    )
    cfn = _cloudformation("UPDATE_ROLLBACK_IN_PROGRESS")
    out = handler.on_event(event, None, ecr_factory=_no_call, http=_no_call, cloudformation=cfn)
    assert out == {
        "PhysicalResourceId": f"Ray={D1}",
        "Data": {"Ray": f"763104351884.dkr.ecr.us-west-2.amazonaws.com/ray@{D1}"},
    }


def test_delete_makes_no_call() -> None:
    event = {"RequestType": "Delete", "PhysicalResourceId": f"Ray={D1}", "ResourceProperties": {}}
    assert handler.on_event(event, None, ecr_factory=_no_call, http=_no_call) == {
        "PhysicalResourceId": f"Ray={D1}"
    }


def test_a_missing_tag_fails_the_deploy_with_the_registrys_reason() -> None:
    with pytest.raises(RuntimeError, match=r"not found in ECR.*Requested image not found"):
        handler.on_event(
            _event("Create", {"Ray": RAY}),
            None,
            ecr_factory=lambda region: _ecr(found=False),
            http=_no_call,
        )
    with pytest.raises(RuntimeError, match=r"2\.99\.0 does not exist: check the tag"):
        handler.on_event(
            _event("Create", {"AwsCli": CLI.replace("2.37.1", "2.99.0")}),
            None,
            ecr_factory=_no_call,
            http=Registry({}),
        )


# -- the synthesized app ------------------------------------------------------------------------


def _containers(app: Synthesized) -> list[tuple[str, dict[str, Any]]]:
    """(object name, container) for every container and init container of every pod template
    the workload stack applies: the RayService's head and workers, the warm-up DaemonSets."""
    found = []
    for r in app.resources("Workload", "Custom::AWSCDK-EKS-KubernetesResource").values():
        for obj in json.loads(resolve(r["Properties"]["Manifest"])):
            templates = []
            if obj["kind"] == "RayService":
                cluster = obj["spec"]["rayClusterConfig"]
                templates = [cluster["headGroupSpec"]["template"]]
                templates += [g["template"] for g in cluster["workerGroupSpecs"]]
            elif obj["kind"] in ("DaemonSet", "Deployment", "Job"):
                templates = [obj["spec"]["template"]]
            for template in templates:
                spec = template["spec"]
                for c in spec.get("initContainers", []) + spec["containers"]:
                    found.append((obj["metadata"]["name"], c))
    return found


@pytest.mark.parametrize("app_name", ["default_app", "variant_app", "token_app"])
def test_every_ray_and_warmup_container_references_its_image_by_digest(
    app_name: str, request: pytest.FixtureRequest
) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    refs = image_refs(app)
    containers = _containers(app)
    names = {name for name, _ in containers}
    assert {app.config.ray_service_name, "image-prepull", "model-prefetch"} <= names
    for name, c in containers:
        # Every image is the digests resource's attribute: repository@sha256, at deploy time.
        assert c["image"] in refs.values(), (name, c["name"], c["image"])
    images = app.only("Workload", "Custom::ImageDigests")["Properties"]
    assert images["AwsCli"] == app.config.aws_cli_image
    assert images["Prefetch"] == app.config.prefetch_image
    ray = resolve(images["Ray"])
    assert ray == "763104351884.dkr.ecr.us-west-2.amazonaws.com/ray:serve-llm-cuda-v1.0"


def test_the_resolver_may_read_exactly_the_dlc_repository(default_app: Synthesized) -> None:
    statements = [
        s
        for p in default_app.resources("Workload", "AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "ecr:" in json.dumps(s["Action"])
    ]
    assert statements == [
        {
            "Action": "ecr:BatchGetImage",
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":ecr:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Fn::FindInMap": ["DlcRegistries", {"Ref": "AWS::Region"}, "account"]},
                        ":repository/ray",
                    ],
                ]
            },
        }
    ]
    # The mapping is the documented table: the deploy region's own DLC account.
    mapping = default_app.templates["Workload"]["Mappings"]["DlcRegistries"]
    assert mapping["af-south-1"] == {
        "account": "626614931356",
        "host": "626614931356.dkr.ecr.af-south-1.amazonaws.com",
    }
    assert mapping["us-west-2"]["account"] == "763104351884"
    assert "us-gov-west-1" not in mapping


def test_only_tagged_ecr_references_need_an_ecr_permission() -> None:
    assert ecr_repository_arn(CLI) is None
    assert ecr_repository_arn(f"{RAY.rsplit(':', 1)[0]}@{D1}") is None
    arn = ecr_repository_arn("111122223333.dkr.ecr.eu-west-1.amazonaws.com/team/ray:2.58")
    assert arn is not None and arn.endswith(":ecr:eu-west-1:111122223333:repository/team/ray")
    # The DLC registry of the China regions has its own domain.
    china = ecr_repository_arn("727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/ray:v1.0")
    assert china is not None and china.endswith(":ecr:cn-north-1:727897471807:repository/ray")
