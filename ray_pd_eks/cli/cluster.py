"""Connecting to the cluster's Kubernetes API the way the readiness Lambda does.

``eks:DescribeCluster`` gives the endpoint and CA; the bearer token is an EKS token signed with
the caller's credentials; the client is the Lambda's :class:`KubeClient`. Kubernetes failures are
turned into one line that says what to do, most often: give this IAM principal an access entry.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ray_pd_eks import lambda_code
from ray_pd_eks.cli.app import App
from ray_pd_eks.cli.errors import ADD_ADMIN_ME_COMMAND, DEPLOY_COMMAND, SET_COMMAND, AccessError
from ray_pd_eks.kv_shapes import kv_bytes_per_token

# The CLI waits on a person, not a CloudFormation deadline: fewer, shorter retries than the Lambda.
KUBE_TIMEOUT_SECONDS = 15.0
KUBE_RETRIES = 2


class Cluster:
    """A KubeClient for the configured cluster, plus what error messages need to know."""

    def __init__(self, app: App) -> None:
        self.app = app
        config = app.config
        aws = app.aws
        self.info = aws.describe_cluster(config.cluster_name)
        state = self.info.get("status", "")
        if state and state not in ("ACTIVE", "UPDATING"):
            raise AccessError(
                f"EKS cluster '{config.cluster_name}' is {state}: wait for ACTIVE "
                f"(`aws eks describe-cluster --name {config.cluster_name} --region {aws.region}`)"
            )
        self.kube = lambda_code.kube()
        self.client: Any = self.kube.KubeClient(
            str(self.info["endpoint"]),
            str(self.info["certificateAuthority"]["data"]),
            lambda: self.kube.eks_token(
                config.cluster_name, session=aws.session, region=aws.region
            ),
            timeout=KUBE_TIMEOUT_SECONDS,
            retries=KUBE_RETRIES,
            sleep=app.runtime.sleep,
            clock=app.runtime.clock,
        )
        self.namespace = config.namespace

    def readiness_props(self) -> Any:
        """The readiness Lambda's ``Props`` for this deployment, to reuse its verdicts."""
        c = self.app.config
        return lambda_code.properties().Props(
            cluster_name=c.cluster_name,
            endpoint=str(self.info["endpoint"]),
            ca_data=str(self.info["certificateAuthority"]["data"]),
            namespace=c.namespace,
            rayservice=c.ray_service_name,
            app_name=c.application_name,
            model_id=c.model_id,
            kv_backend=c.kv_backend,
            expected_gpu_nodes=c.gpu_node_min,
            serving_mode=c.serving_mode,
            ray_auth_secret=c.ray_auth_secret_name,
            kv_bytes_per_token=kv_bytes_per_token(c.model_source, c.dtype, c.kv_cache_dtype),
            workers_privileged=c.workers_privileged,
        )

    def serving_mode(self, rayservice: dict[str, Any] | None) -> str:
        """The mode the cluster runs (from the live app's builder), else the configured one."""
        live: str | None = lambda_code.checks().serving_mode(rayservice)
        return live or self.app.config.serving_mode

    def dashboard(self) -> Any:
        """The Ray dashboard (head service :8265) through the API server proxy, with the Ray
        token read from its Secret (RBAC ``get`` on that Secret)."""
        config = self.app.config
        return lambda_code.ray_dashboard().RayDashboard(
            self.client,
            self.namespace,
            config.ray_service_name,
            token_secret=config.ray_auth_secret_name,
        )

    def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        with self.errors():
            result: dict[str, Any] = self.client.get_json(path, params)
            return result

    def find_rayservice(self) -> dict[str, Any] | None:
        """The RayService object, or None when it does not exist (yet)."""
        config = self.app.config
        path = (
            f"/apis/ray.io/v1/namespaces/{config.namespace}/rayservices/{config.ray_service_name}"
        )
        with self.errors():
            try:
                result: dict[str, Any] = self.client.get_json(path)
                return result
            except self.kube.KubeApiError as err:
                if err.status != 404:
                    raise
        return None

    def rayservice(self) -> dict[str, Any]:
        """The RayService object; missing is an error with the fix (exit 3)."""
        found = self.find_rayservice()
        if found is not None:
            return found
        config = self.app.config
        raise AccessError(
            f"RayService '{config.ray_service_name}' not found in namespace '{config.namespace}' "
            f"of cluster '{config.cluster_name}': deploy the workload stack "
            f"(`{DEPLOY_COMMAND}`) or set the right ones: `{SET_COMMAND} rayServiceName=... "
            "--set namespace=...`"
        )

    @contextmanager
    def errors(self) -> Iterator[None]:
        """KubeAuthError -> the access-entry fix; a Ray token problem -> its own message (never
        "not running"); unreachable -> the endpoint-access fix."""
        try:
            yield
        except self.kube.RayAuthError as err:
            raise AccessError(f"Ray token: {err}") from None
        except self.kube.KubeAuthError as err:
            raise AccessError(self._denied_message(err)) from None
        except self.kube.KubeTlsError as err:
            raise AccessError(str(err)) from None
        except self.kube.KubeApiError as err:
            if err.status is None:
                raise AccessError(self._unreachable_message(err)) from None
            raise AccessError(str(err)) from None

    def _denied_message(self, err: Any) -> str:
        config = self.app.config
        aws = self.app.aws
        principal = aws.principal_arn()
        what = "rejected" if err.status == 401 else "denied"
        return (
            f"the cluster {what} {principal} ({err.status}: {err.reason}): add it with "
            f"`{ADD_ADMIN_ME_COMMAND}` and `{DEPLOY_COMMAND}`, or run `aws eks "
            f"create-access-entry --cluster-name {config.cluster_name} --principal-arn "
            f"{principal} --region {aws.region}` and `aws eks associate-access-policy "
            f"--cluster-name {config.cluster_name} --principal-arn {principal} --policy-arn "
            "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy "
            "--access-scope type=cluster`"
        )

    def _unreachable_message(self, err: Any) -> str:
        vpc = self.info.get("resourcesVpcConfig", {})
        endpoint = self.info.get("endpoint", "?")
        if not vpc.get("endpointPublicAccess", True):
            hint = (
                "the API endpoint is private: run the tool from inside the VPC, or open it to "
                f"your address with `{SET_COMMAND} endpointPublicCidrs=<your-ip>/32` and "
                f"`{DEPLOY_COMMAND}`"
            )
        else:
            cidrs = ", ".join(vpc.get("publicAccessCidrs", [])) or "0.0.0.0/0"
            hint = f"your address must be in the endpoint's public CIDRs ({cidrs})"
        return f"cannot reach the Kubernetes API at {endpoint} ({err.reason}): {hint}"
