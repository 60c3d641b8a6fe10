"""Preflight's model checks: the staged model in S3 (a same-region bucket whose prefix holds
config.json and safetensors weights) and the Hugging Face token's secret. Only metadata is
read: never an object's or a secret's content."""

from __future__ import annotations

from collections.abc import Iterator

from botocore import exceptions as bce

from ray_pd_eks.cli.aws import error_code
from ray_pd_eks.cli.errors import AccessError
from ray_pd_eks.cli.output import FAIL, OK, WARN, Finding
from ray_pd_eks.cli.preflight.base import Checks
from ray_pd_eks.config import set_hint
from ray_pd_eks.trust import MODEL_ACCESS_TAG_KEY, MODEL_ACCESS_TAG_VALUE, secret_tag_command

AWS_MANAGED_SECRETS_KEY = "alias/aws/secretsmanager"
S3_LIST_LIMIT = 1000  # one ListObjectsV2 page: a model folder holds far fewer objects
GIB = 1024**3


def bucket_region(location: str | None) -> str:
    """``GetBucketLocation``'s answer as a region: none means us-east-1, ``EU`` eu-west-1."""
    if not location:
        return "us-east-1"
    return "eu-west-1" if location == "EU" else location


class ModelChecks(Checks):
    def model_in_s3(self) -> Iterator[Finding]:
        """The staged model: a same-region bucket whose prefix holds config.json and
        safetensors weights. Lists keys and sizes only, never reads an object."""
        c = self.config
        if not c.model_s3_uri:
            return
        bucket, prefix = c.model_s3_bucket, c.model_s3_prefix
        uri = f"s3://{bucket}/{prefix}/"
        s3 = self.aws.client("s3")
        try:
            with self.aws.errors("s3:GetBucketLocation"):
                try:
                    location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
                except bce.ClientError as err:
                    if error_code(err) != "NoSuchBucket":
                        raise
                    yield Finding(
                        FAIL,
                        "model in S3",
                        f"bucket {bucket} does not exist: fix modelS3Uri={c.model_s3_uri} "
                        f"({set_hint('modelS3Uri')})",
                    )
                    return
            region = bucket_region(location)
            if region != self.aws.region:
                yield Finding(
                    FAIL,
                    "model in S3",
                    f"bucket {bucket} is in {region}, the deployment in {self.aws.region}: "
                    f"staging must be same-region; copy the model to a bucket in "
                    f"{self.aws.region} and point modelS3Uri at it ({set_hint('modelS3Uri')})",
                )
                return
            with self.aws.errors("s3:ListObjectsV2"):
                page = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/", MaxKeys=S3_LIST_LIMIT)
        except AccessError as err:
            yield Finding(
                WARN,
                "model in S3",
                f"cannot verify {uri} ({err.message}); the deploy's role is read-only on that "
                f"prefix anyway: check it holds config.json and *.safetensors (`aws s3 ls {uri}`)",
            )
            return
        objects = page.get("Contents", [])
        names = [str(o["Key"])[len(prefix) + 1 :] for o in objects]
        top = {n for n in names if n and "/" not in n}
        weights = sorted(n for n in top if n.endswith(".safetensors"))
        missing = [
            name
            for name, present in (("config.json", "config.json" in top), ("*.safetensors", weights))
            if not present
        ]
        count = f"{len(objects)}{'+' if page.get('IsTruncated') else ''}"
        if missing:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            found = f"found {count} objects: {shown}" if names else "it is empty"
            yield Finding(
                FAIL,
                "model in S3",
                f"{uri} has no {' and no '.join(missing)} directly under it ({found}): point "
                "modelS3Uri at the folder holding the model's config.json and weights "
                f"({set_hint('modelS3Uri')})",
            )
            return
        size = sum(int(o.get("Size", 0)) for o in objects) / GIB
        yield Finding(
            OK,
            "model in S3",
            f"{uri}: {count} objects, {size:.1f} GiB (config.json, {len(weights)} "
            f"*.safetensors), bucket in {region}",
        )

    def hf_token(self) -> Iterator[Finding]:
        """The token secret exists and the pods can decrypt it. Described, never read:
        preflight must not hold the token."""
        arn = self.config.hf_token_secret_arn
        if not arn:
            return
        secret_region = arn.split(":")[3] if arn.count(":") >= 6 else self.aws.region
        if secret_region != self.aws.region:
            yield Finding(
                FAIL,
                "hugging face token",
                f"the secret is in {secret_region}, the deployment in {self.aws.region}: use a "
                f"secret in {self.aws.region} (ray-pd-eks settings --set hfTokenSecretArn=...)",
            )
            return
        sm = self.aws.client("secretsmanager")
        try:
            secret = self.aws.unless_missing(
                "secretsmanager:DescribeSecret", lambda: sm.describe_secret(SecretId=arn)
            )
        except AccessError as err:
            yield Finding(WARN, "hugging face token", f"cannot check {arn} ({err.message})")
            return
        if secret is None:
            yield Finding(
                FAIL,
                "hugging face token",
                f"{arn} not found in {self.aws.region}: create it (`aws secretsmanager "
                "create-secret --name hf-token --secret-string file://hf-token.txt`) or fix "
                "ray-pd-eks settings --set hfTokenSecretArn=...",
            )
            return
        name = str(secret.get("Name") or arn)
        deleted = secret.get("DeletedDate")
        if deleted:
            when = deleted.strftime("%Y-%m-%d") if hasattr(deleted, "strftime") else deleted
            yield Finding(
                FAIL,
                "hugging face token",
                f"{name} is scheduled for deletion ({when}): restore it with `aws "
                f"secretsmanager restore-secret --secret-id {arn}` or use another secret",
            )
            return
        key = str(secret.get("KmsKeyId") or "")
        if key and not key.endswith(AWS_MANAGED_SECRETS_KEY):
            yield Finding(
                WARN,
                "hugging face token",
                f"{name} is encrypted with the customer managed KMS key {key}: the pods' role "
                "gets no kms:Decrypt on it, so the hf-token init container fails unless that "
                "key's policy lets the model-fetch roles decrypt; or re-encrypt the secret "
                f"with the AWS managed key ({AWS_MANAGED_SECRETS_KEY})",
            )
            return
        tags = {str(t.get("Key")): str(t.get("Value")) for t in secret.get("Tags") or []}
        if tags.get(MODEL_ACCESS_TAG_KEY) != MODEL_ACCESS_TAG_VALUE:
            yield Finding(
                FAIL,
                "hugging face token",
                f"{name} lacks the tag {MODEL_ACCESS_TAG_KEY}={MODEL_ACCESS_TAG_VALUE}: the "
                "pods may read only a secret tagged for this app, so the hf-token init "
                f"container would be denied; tag it: `{secret_tag_command(arn)}`",
            )
            return
        stages = secret.get("VersionIdsToStages") or {}
        if not any("AWSCURRENT" in s for s in stages.values()):
            yield Finding(
                WARN,
                "hugging face token",
                f"{name} lists no current value (AWSCURRENT): put the token with `aws "
                f"secretsmanager put-secret-value --secret-id {arn} --secret-string "
                "file://hf-token.txt`",
            )
            return
        yield Finding(
            OK,
            "hugging face token",
            f"{name} exists, encrypted with the AWS managed key; the pods read it, "
            "preflight only described it",
        )
