"""Workload layer: the node warm-up, the system node group, then namespace, KubeRay operator
and the RayService, and (when ``endpointExposure`` is set) the application endpoint in front of
it.

It needs the cluster and the system node only (the operator and the Ray head run there), so
it deploys beside the GPU node stack instead of after it; the Ray workers wait in Pending for
the GPU nodes, and the readiness stack's check proves the whole.
"""

from __future__ import annotations

from typing import Unpack

from aws_cdk import Aws, CfnOutput
from constructs import Construct

from pd_constructs.cluster.cluster import SystemNodeGroup
from pd_constructs.endpoint.endpoint import ApplicationEndpoint
from pd_constructs.observability.observability import PdObservability
from pd_constructs.serving.images import ImageDigests, ray_image
from pd_constructs.serving.warmup import PAUSE_IMAGE, NodeWarmup
from pd_constructs.serving.workload import PdWorkload
from ray_pd_eks import endpoint_commands as commands
from ray_pd_eks.config import AppConfig
from stacks.app_stack import InClusterStack, InClusterStackProps


class WorkloadStack(InClusterStack):
    def __init__(
        self, scope: Construct, construct_id: str, **props: Unpack[InClusterStackProps]
    ) -> None:
        super().__init__(scope, construct_id, **props)
        config, cluster = self.config, self.cluster
        self.system_nodes = SystemNodeGroup(
            self,
            "SystemNodes",
            cluster=cluster,
            instance_type=config.system_node_type,
            node_count=config.system_node_count,
            root_volume_gib=config.system_root_volume_gib,
            root_volume_iops=config.system_root_volume_iops,
            root_volume_throughput=config.system_root_volume_throughput,
        )
        # Every pod references its image by digest, resolved once here
        # (pd_constructs/serving/images.py): the Ray pods and the pre-pull on every node run the
        # same build.
        ray_reference, ray_repository = ray_image(self, config)
        images = {
            "Ray": ray_reference,
            "AwsCli": config.aws_cli_image,
            "Prefetch": config.prefetch_image,
        }
        if config.gpu_warm_spare_nodes:
            images["Pause"] = PAUSE_IMAGE  # the warm spares' placeholders
        self.images = ImageDigests(
            self,
            "Images",
            repository_arns=(ray_repository,) if ray_repository else (),
            images=images,
            log_policy=self.log_policy,
        )
        # Needs only the cluster: each node starts pulling the image and the weights as it
        # joins (the GPU nodes join while this stack deploys), while the operator and the
        # RayService are installed.
        self.warmup = NodeWarmup(
            self,
            "Warmup",
            cluster=cluster,
            config=config,
            image=self.images.reference("Ray"),
            region=Aws.REGION,
            prefetch_image=self.images.reference("Prefetch"),
            aws_cli_image=self.images.reference("AwsCli"),
            pause_image=self.images.reference("Pause") if config.gpu_warm_spare_nodes else None,
        )
        self.workload = PdWorkload(
            self,
            "Workload",
            cluster=cluster,
            config=config,
            image=self.images.reference("Ray"),
            region=Aws.REGION,
            aws_cli_image=self.images.reference("AwsCli"),
            provider_scope=self.providers,
        )
        # The operator's Helm release waits for its pod, which needs a node.
        self.workload.operator.node.add_dependency(self.system_nodes)

        serve_svc = f"{config.ray_service_name}-serve-svc"
        self.outputs: dict[str, CfnOutput] = {
            "Namespace": CfnOutput(self, "Namespace", value=config.namespace),
            "RayServiceName": CfnOutput(self, "RayServiceName", value=config.ray_service_name),
            "ServeService": CfnOutput(
                self, "ServeService", value=f"{serve_svc}.{config.namespace}:8000"
            ),
            "PortForwardCommand": CfnOutput(
                self,
                "PortForwardCommand",
                value=f"kubectl port-forward -n {config.namespace} svc/{serve_svc} 8000:8000",
            ),
            # What this deploy did to the Ray cluster, printed by `cdk deploy`: recreated (with
            # the downtime) when its spec changed, unchanged for Serve-level changes.
            "RayClusterChange": CfnOutput(
                self,
                "RayClusterChange",
                value=self.workload.recreate.attribute("Summary"),
                description="What this deploy did to the Ray cluster (recreated = downtime)",
            ),
        }
        self.observability: PdObservability | None = None
        if config.observability_enabled:
            self.observability = PdObservability(
                self,
                "Observability",
                cluster=cluster,
                config=config,
                namespace=self.workload.namespace,
                log_policy=self.log_policy,
            )
            # The add-on's Deployments (its operator, the cluster scraper) need a node before
            # EKS reports the add-on ACTIVE.
            self.observability.addon.node.add_dependency(self.system_nodes)
            self.outputs["DashboardUrl"] = CfnOutput(
                self,
                "DashboardUrl",
                value=self.observability.dashboard_url,
                description="CloudWatch dashboard of the endpoint, engines, KV transfer, GPUs, EFA",
            )
            self.outputs["AlarmTopicArn"] = CfnOutput(
                self,
                "AlarmTopicArn",
                value=self.observability.topic.topic.topic_arn,
                description="SNS topic of the PromQL alarms (subscribe more endpoints here)",
            )

        self.endpoint: ApplicationEndpoint | None = None
        if config.endpoint_exposed:
            self.endpoint = ApplicationEndpoint(
                self,
                "ApplicationEndpoint",
                cluster=cluster,
                config=config,
                region=Aws.REGION,
                rayservice=self.workload.rayservice,
            )
            # The controller's pods need a node.
            self.endpoint.controller.chart.node.add_dependency(self.system_nodes)
            self._endpoint_outputs(config, self.endpoint)

    def _endpoint_outputs(self, config: AppConfig, endpoint: ApplicationEndpoint) -> None:
        """The URL, and the exact commands to get a token and call the model."""
        url = commands.endpoint_url(endpoint.endpoint.host)
        bearer = endpoint.issuer is not None
        values = {
            "EndpointUrl": (url, "The model endpoint (OpenAI-compatible, under /v1)"),
            "EndpointLoadBalancerDns": (
                endpoint.endpoint.load_balancer.load_balancer_dns_name,
                "Point endpointDomainName's DNS record (CNAME/alias) here",
            ),
            "EndpointAuth": (
                config.endpoint_auth,
                "jwt: every request carries an access token (EndpointTokenCommand)",
            ),
            "EndpointCurlCommand": (
                commands.curl_command(url, config.model_id, bearer=bearer),
                "One chat completion with curl",
            ),
            "EndpointOpenAiPython": (
                commands.openai_python_command(url, config.model_id, bearer=bearer),
                "One chat completion with the OpenAI Python client (pip install openai)",
            ),
        }
        if endpoint.issuer is not None:
            values["EndpointJwtIssuer"] = (endpoint.issuer, "Issuer the load balancer checks")
        if config.endpoint_scope:
            values["EndpointScope"] = (config.endpoint_scope, "Scope the token must carry")
        issuer = endpoint.token_issuer
        if issuer is not None:
            values |= {
                "EndpointUserPoolId": (issuer.user_pool.user_pool_id, "Cognito user pool"),
                "EndpointClientId": (
                    issuer.client.user_pool_client_id,
                    "App client (client-credentials grant); its secret stays in Cognito",
                ),
                "EndpointTokenUrl": (issuer.token_url, "OAuth 2.0 token endpoint"),
                "EndpointTokenCommand": (
                    commands.token_command(
                        token_url=issuer.token_url,
                        user_pool_id=issuer.user_pool.user_pool_id,
                        client_id=issuer.client.user_pool_client_id,
                        region=self.region,
                        scope=issuer.scope,
                    ),
                    "Sets $TOKEN to an access token (valid one hour)",
                ),
            }
        for name, (value, description) in values.items():
            self.outputs[name] = CfnOutput(self, name, value=value, description=description)
