"""Resolves the images the pods run to digests at deploy time, and keeps them until the
configured image changes.

A tag can move: the Ray LLM image is pulled ``IfNotPresent`` on each node as it joins, so a tag
that moved between two node launches would give prefill and decode different Ray/vLLM/NIXL
builds (NIXL peers must match). Every pod therefore references ``repository@sha256:<digest>``,
resolved here once:

* an image already given by digest is used as it is, with no call;
* Amazon ECR (``<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>``): ``BatchGetImage``
  on that repository (the Deep Learning Containers registry 763104351884 lets any account that
  may pull call it), the digest of the manifest (or index) as stored;
* any other registry (ECR Public, Docker Hub, ...): the OCI distribution API, anonymously:
  ``HEAD /v2/<repository>/manifests/<tag>`` with the bearer token the registry's challenge
  names, and its ``Docker-Content-Digest``.

Sticky: on Update, an image whose configured reference did not change keeps the digest
recorded in the physical id (``<key>=sha256:<hex>;...``), so a redeploy never moves the pods to
another build behind the user's back; a changed reference is resolved again. On an Update sent
while the stack is ``UPDATE_ROLLBACK_IN_PROGRESS`` (one ``DescribeStacks`` on the event's
stack) it answers at once from the physical id, with no registry call.

CloudFormation custom resource handler (CDK Provider ``on_event``); standard library + boto3.
Resource properties: one image reference per key (``Ray``, ``AwsCli``, ``Prefetch``); the
resource's attribute of the same key is the pinned reference.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from functools import partial
from typing import Any

import boto3
from botocore.exceptions import ClientError
from pd_lambda import rollback
from pd_lambda.rollback import ROLLBACK_STATUS

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

DIGEST = re.compile(r"^(?P<repository>[^@\s]+)@(?P<digest>sha256:[0-9a-f]{64})$")
TAGGED = re.compile(
    r"^(?P<registry>[a-z0-9.-]+(?::\d+)?)/(?P<path>[a-z0-9._/-]+):(?P<tag>[A-Za-z0-9_][\w.-]{0,127})$"
)
ECR_HOST = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$"
)
# Manifest media types a pull accepts, index first: the digest is that of what the tag names.
MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
DOCKER_HUB = {"docker.io": "registry-1.docker.io", "index.docker.io": "registry-1.docker.io"}
HTTP_TIMEOUT_SECONDS = 10
NOT_IMAGES = ("ServiceToken",)

# (method, url, headers) -> (status, headers (lower-case names), body)
Http = Callable[[str, str, dict[str, str]], tuple[int, dict[str, str], bytes]]


def _urllib(method: str, url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
            return (
                response.status,
                {k.lower(): v for k, v in response.headers.items()},
                response.read(),
            )
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def _challenge(header: str) -> dict[str, str]:
    """``Bearer realm="...",service="...",scope="..."`` as a mapping."""
    scheme, _, params = header.partition(" ")
    if scheme.lower() != "bearer":
        return {}
    return {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', params)}


def registry_digest(registry: str, path: str, tag: str, http: Http) -> str:
    """The digest a registry's OCI distribution API gives for ``path:tag``, anonymously."""
    host = DOCKER_HUB.get(registry, registry)
    if host == "registry-1.docker.io" and "/" not in path:
        path = f"library/{path}"
    url = f"https://{host}/v2/{path}/manifests/{urllib.parse.quote(tag)}"
    headers = {"Accept": ", ".join(MEDIA_TYPES)}
    status, response_headers, body = http("HEAD", url, headers)
    if status == 401:
        challenge = _challenge(response_headers.get("www-authenticate", ""))
        if "realm" not in challenge:
            raise RuntimeError(f"{registry}/{path}:{tag}: the registry asks for credentials")
        query = {"scope": f"repository:{path}:pull"}
        if challenge.get("service"):
            query["service"] = challenge["service"]
        token_status, _, token_body = http(
            "GET", f"{challenge['realm']}?{urllib.parse.urlencode(query)}", {}
        )
        if token_status != 200:
            raise RuntimeError(f"{registry}/{path}:{tag}: no pull token (HTTP {token_status})")
        token_json = json.loads(token_body or b"{}")
        token = token_json.get("token") or token_json.get("access_token") or ""
        headers["Authorization"] = f"Bearer {token}"
        status, response_headers, body = http("HEAD", url, headers)
    if status == 404:
        raise RuntimeError(f"{registry}/{path}:{tag} does not exist: check the tag")
    if status != 200:
        raise RuntimeError(f"{registry}/{path}:{tag}: the registry answered HTTP {status}")
    digest = response_headers.get("docker-content-digest", "")
    if not digest:
        # A registry that does not send the header on HEAD: hash the manifest itself.
        _, _, body = http("GET", url, headers)
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise RuntimeError(f"{registry}/{path}:{tag}: unexpected digest {digest!r}")
    return digest


def ecr_digest(account: str, path: str, tag: str, ecr: Any) -> str:
    """The digest ECR stores for ``path:tag`` in registry ``account`` (``BatchGetImage``)."""
    try:
        found = ecr.batch_get_image(
            registryId=account,
            repositoryName=path,
            imageIds=[{"imageTag": tag}],
            acceptedMediaTypes=list(MEDIA_TYPES),
        )
    except ClientError as exc:
        raise RuntimeError(f"{account}/{path}:{tag}: ECR BatchGetImage failed: {exc}") from exc
    images = found.get("images") or []
    if not images:
        reasons = "; ".join(
            f"{f.get('failureCode')}: {f.get('failureReason')}" for f in found.get("failures", [])
        )
        raise RuntimeError(f"{account}/{path}:{tag} not found in ECR ({reasons or 'no image'})")
    return str(images[0]["imageId"]["imageDigest"])


def resolve(reference: str, ecr_factory: Callable[[str], Any], http: Http) -> str:
    """``repository@sha256:<hex>`` for a reference given by tag or by digest."""
    pinned = DIGEST.match(reference)
    if pinned:
        return reference
    tagged = TAGGED.match(reference)
    if not tagged:
        raise RuntimeError(f"{reference!r} is not registry/repository:tag or @sha256:<digest>")
    registry, path, tag = tagged["registry"], tagged["path"], tagged["tag"]
    ecr_host = ECR_HOST.match(registry)
    if ecr_host:
        digest = ecr_digest(ecr_host["account"], path, tag, ecr_factory(ecr_host["region"]))
    else:
        digest = registry_digest(registry, path, tag, http)
    LOG.info("%s is %s", reference, digest)
    return f"{registry}/{path}@{digest}"


def _repository(reference: str) -> str:
    pinned = DIGEST.match(reference)
    if pinned:
        return pinned["repository"]
    return reference.rsplit(":", 1)[0]


def parse_physical_id(physical_id: str) -> dict[str, str]:
    """``Ray=sha256:...;AwsCli=sha256:...`` -> {key: digest}."""
    pairs = (p.partition("=") for p in physical_id.split(";") if "=" in p)
    return {k: v for k, _, v in pairs if re.fullmatch(r"sha256:[0-9a-f]{64}", v)}


def physical_id(resolved: dict[str, str]) -> str:
    return ";".join(f"{k}={DIGEST.match(v)['digest']}" for k, v in sorted(resolved.items()))  # type: ignore[index]


# Whether the event's stack is UPDATE_ROLLBACK_IN_PROGRESS (pd_lambda.rollback), asked with
# this handler's CloudFormation client: stack_rolling_back(event, cloudformation=None).
stack_rolling_back = partial(
    rollback.stack_rolling_back, make_client=lambda: boto3.client("cloudformation")
)


def _images(props: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in props.items() if k not in NOT_IMAGES}


def on_event(
    event: dict[str, Any],
    context: Any,
    ecr_factory: Callable[[str], Any] | None = None,
    http: Http | None = None,
    cloudformation: Any = None,
) -> dict[str, Any]:
    request = event["RequestType"]
    if request == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    images = _images(event["ResourceProperties"])
    previous = parse_physical_id(str(event.get("PhysicalResourceId") or ""))
    if request == "Update" and stack_rolling_back(event, cloudformation):
        # Rolled back in place only when the physical id did not change, i.e. the digests are
        # the ones the stack returns to: answer from it.
        data = {
            k: f"{_repository(ref)}@{previous[k]}" if k in previous else ref
            for k, ref in images.items()
        }
        LOG.info("Update during %s: answering at once with %s", ROLLBACK_STATUS, data)
        return {"PhysicalResourceId": event["PhysicalResourceId"], "Data": data}
    old = _images(event.get("OldResourceProperties") or {}) if request == "Update" else {}
    factory = ecr_factory or (lambda region: boto3.client("ecr", region_name=region))
    resolved: dict[str, str] = {}
    for key, reference in images.items():
        if old.get(key) == reference and key in previous and not DIGEST.match(reference):
            resolved[key] = f"{_repository(reference)}@{previous[key]}"
            LOG.info("%s unchanged: keeping %s", reference, previous[key])
        else:
            resolved[key] = resolve(reference, factory, http or _urllib)
    return {"PhysicalResourceId": physical_id(resolved), "Data": resolved}
