"""A model of how long a from-scratch deploy takes, computed from the synthesized templates.

The deploy is a graph: CloudFormation starts a resource when everything it references (``Ref``,
``Fn::GetAtt``, ``DependsOn``) is done, and a stack when the stacks it depends on are done. Inside
the cluster, the nodes pull images and download weights as soon as a node and a manifest that
needs them exist. This module schedules both with a fixed duration per resource type (and a few
rates and sizes for what happens on the nodes), and reports when the readiness check proves the
endpoint: the critical path of the deploy. docs/deploy-timeline.md explains every number.

It is a model, not a measurement: the numbers are estimates from sizes and rates, the same for
every run, so two topologies can be compared exactly; the absolute minutes are approximate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# -- the duration model (minutes) ---------------------------------------------------------------

STACK_OVERHEAD = 0.5  # change set creation and execution start, per stack
DEFAULT_DURATION = 0.1
DURATIONS = {
    "AWS::CDK::Metadata": 0.0,
    "AWS::EC2::VPC": 0.3,
    "AWS::EC2::NatGateway": 2.0,
    "AWS::EC2::VPCGatewayAttachment": 0.3,
    "AWS::EC2::VPCEndpoint": 0.5,
    "AWS::EC2::FlowLog": 0.2,
    "AWS::EKS::Cluster": 10.0,  # the control plane: 10-15 in published averages
    "AWS::EKS::Addon": 1.0,
    "AWS::EKS::AccessEntry": 0.2,
    "AWS::EKS::PodIdentityAssociation": 0.2,
    "AWS::IAM::Role": 0.3,  # includes IAM's propagation delay
    "AWS::IAM::Policy": 0.2,
    "AWS::KMS::Key": 0.5,
    "AWS::Lambda::Function": 0.3,
    "AWS::Lambda::LayerVersion": 0.3,
    "AWS::Logs::LogGroup": 0.05,
    "AWS::StepFunctions::StateMachine": 0.2,
    "Custom::AWSCDK-EKS-KubernetesResource": 0.3,  # kubectl apply through the kubectl Lambda
    "Custom::AWSCDK-EKS-HelmChart": 1.0,  # helm upgrade --install --wait
    "Custom::GpuAvailabilityZone": 0.2,
    "Custom::ImageDigests": 0.2,
}
# Managed node groups: launch, boot, join, ACTIVE. The NVIDIA AMI boots slower (driver, EFA).
NODEGROUP_MINUTES = {"standard": 3.0, "gpu": 4.5}
WATCH_POLL = 0.5  # a waiter custom resource's first poll
CLUSTER_ACTIVE_POLL = 0.25  # Custom::ClusterActive polls every 15 s: it ends one poll after ACTIVE

# What happens on the nodes.
DLC_IMAGE_GB = 20.0  # compressed: what is downloaded
DLC_UNPACKED_FACTOR = 2.0  # what is written to disk, relative to the download
SMALL_IMAGE_MINUTES = 0.2  # a ~50-150 MB image (AWS CLI, Python slim, plugins)
PULL_CEILING_MBPS = 100.0  # download + gunzip per node: containerd's layer downloads from ECR
# SOCI parallel pull and unpack (nodeadm's FastImagePull): AWS measured a 19.3 GB Deep Learning
# Container image in 2 min 13 s against 4 min 44 s with containerd's default pull (AWS
# Containers blog, "Introducing Seekable OCI Parallel Pull mode for Amazon EKS"): the same
# download, 284/133 times faster.
SOCI_PULL_SPEEDUP = 284 / 133
NVME_MBPS = 2000.0  # RAID0 of the instance-store NVMe: never the bottleneck
GP3_BASELINE_MBPS = 125.0
WEIGHTS_GB = 18.0
# Hugging Face (Xet) to one GPU node while the other downloads too, through the one NAT
# gateway: its 5 Gbit/s before it scales (it "supports 5 Gbps of bandwidth and automatically
# scales up to 100 Gbps", Amazon VPC User Guide, NAT gateway basics; how fast it scales is not
# published) shared by two nodes, 2.5 Gbit/s, rounded down. Below what the pinned hf_xet
# measured with the prefetch's buffer settings (unsloth-zoo PR 972: 17.5 Gbit/s for a 61 GB,
# 13-shard repo, 3.2-4.8 Gbit/s for single 2.6-3.2 GB files; assets/manifests/containers/
# prefetch-from-hf.yaml) and what a g6.8xlarge may send through a gateway (50 % of its 25
# Gbit/s with 32 vCPUs; 5 Gbit/s per flow, and Xet opens many: EC2 User Guide, instance
# network bandwidth). docs/deploy-timeline.md, "The model".
HF_MBPS = 300.0
S3_MBPS = 400.0  # S3 in-region to one node (aws s3 sync)
PIP_INSTALL_MINUTES = 0.2  # the prefetch installs its pinned huggingface_hub
HEAD_START = 1.0  # Ray head, GCS, dashboard and Serve controller up
ENGINE_START = 2.0  # vLLM loads the weights from local disk and starts (enforce_eager), NIXL up
SERVE_DEPLOY = 0.5  # Serve deploys prefill and decode and reports RUNNING
PROOF = 0.5  # the readiness check's chat completion and NIXL evidence


# -- templates ----------------------------------------------------------------------------------


@dataclass
class Deploy:
    """The synthesized stacks: templates and stack dependencies, in the CLI's deploy order."""

    templates: dict[str, dict[str, Any]]
    dependencies: dict[str, set[str]]

    @classmethod
    def from_assembly(cls, outdir: Path, stage: str = "RayPdEks") -> Deploy:
        """Read a cloud assembly (``cdk.out``, or a test synth's outdir) of the Stage."""
        root = outdir / f"assembly-{stage}"
        manifest = json.loads((root / "manifest.json").read_text())
        templates: dict[str, dict[str, Any]] = {}
        artifact_names: dict[str, str] = {}
        raw_deps: dict[str, list[str]] = {}
        for artifact_id, artifact in manifest["artifacts"].items():
            if artifact["type"] != "aws:cloudformation:stack":
                continue
            name = artifact_id.split("-", 1)[-1] if "-" in artifact_id else artifact_id
            name = artifact.get("displayName", name).split("/")[-1]
            artifact_names[artifact_id] = name
            template_file = artifact["properties"]["templateFile"]
            templates[name] = json.loads((root / template_file).read_text())
            raw_deps[name] = list(artifact.get("dependencies", []))
        dependencies = {
            name: {artifact_names[d] for d in deps if d in artifact_names}
            for name, deps in raw_deps.items()
        }
        return cls(templates, dependencies)


def refs(value: Any) -> set[str]:
    """Logical ids a template value refers to (Ref, Fn::GetAtt, Fn::Sub; not DependsOn)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, arg in value.items():
            if key == "Ref" and isinstance(arg, str) and not arg.startswith("AWS::"):
                found.add(arg)
            elif key == "Fn::GetAtt":
                found.add(arg[0] if isinstance(arg, list) else str(arg).split(".")[0])
            elif key == "Fn::Sub":
                text = arg[0] if isinstance(arg, list) else arg
                found |= {m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", str(text))}
                if isinstance(arg, list):
                    found |= refs(arg[1])
            else:
                found |= refs(arg)
    elif isinstance(value, list):
        for item in value:
            found |= refs(item)
    return found


def _depends_on(resource: Mapping[str, Any]) -> set[str]:
    value = resource.get("DependsOn", [])
    return {value} if isinstance(value, str) else set(value)


def template_text(value: Any) -> str:
    """A template value as text, with CloudFormation tokens as ``<...>`` placeholders."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(template_text(p) for p in parts)
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    return "<token>"


def _manifest(resource: Mapping[str, Any]) -> list[dict[str, Any]]:
    try:
        objects = json.loads(template_text(resource["Properties"].get("Manifest", "[]")))
    except json.JSONDecodeError:
        return []
    return [o for o in objects if isinstance(o, dict)]


def _pod_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj.get("spec", {}).get("template", {}).get("spec", {}))


# -- the schedule -------------------------------------------------------------------------------


@dataclass
class Step:
    """One scheduled activity: a CloudFormation resource or something on the nodes."""

    name: str
    start: float
    end: float
    after: str  # what it waited for last (the critical predecessor)
    stack: str = ""

    @property
    def minutes(self) -> float:
        return self.end - self.start


@dataclass
class Timeline:
    steps: dict[str, Step] = field(default_factory=dict)
    stacks: dict[str, Step] = field(default_factory=dict)
    proven: str = ""  # the step that proves the endpoint

    @property
    def endpoint_minutes(self) -> float:
        return self.steps[self.proven].end

    @property
    def deploy_minutes(self) -> float:
        return max(s.end for s in self.stacks.values())

    def critical_path(self) -> list[Step]:
        """From the proof back to the start, following each step's last predecessor."""
        path: list[Step] = []
        name = self.proven
        seen: set[str] = set()
        while name and name not in seen:
            seen.add(name)
            step = self.steps.get(name) or self.stacks.get(name)
            if step is None:
                break
            path.append(step)
            name = step.after
        return list(reversed(path))


def _latest(
    candidates: Iterable[tuple[float, str]], floor: float, floor_name: str
) -> tuple[float, str]:
    best = (floor, floor_name)
    for when, name in candidates:
        if when > best[0]:
            best = (when, name)
    return best


# The EKS control plane's creation, as AWS and public measurements put it: about 10 minutes at
# best, 15 in published averages. The README states the deploy as the range these give.
CONTROL_PLANE_MINUTES_RANGE = (10.0, 15.0)


class _Model:
    def __init__(
        self, deploy: Deploy, concurrency: int, control_plane_minutes: float | None = None
    ) -> None:
        self.deploy = deploy
        self.concurrency = concurrency
        self.durations = dict(DURATIONS)
        if control_plane_minutes is not None:
            self.durations["AWS::EKS::Cluster"] = control_plane_minutes
        self.timeline = Timeline()

    # CloudFormation ---------------------------------------------------------------------------

    def run(self) -> Timeline:
        order = self._stack_order()
        previous_end, previous_name = 0.0, ""
        for stack in order:
            deps = [
                (self.timeline.stacks[f"stack {d}"].end, f"stack {d}")
                for d in self.deploy.dependencies[stack]
            ]
            if self.concurrency == 1:
                deps.append((previous_end, previous_name))
            start, after = _latest(deps, 0.0, "")
            self._schedule_stack(stack, start + STACK_OVERHEAD, after)
            end_step = max(
                (s for s in self.timeline.steps.values() if s.stack == stack),
                key=lambda s: s.end,
            )
            self.timeline.stacks[f"stack {stack}"] = Step(
                f"stack {stack}", start, end_step.end, end_step.name, stack
            )
            previous_end, previous_name = end_step.end, f"stack {stack}"
        return self.timeline

    def _waits_for(self, stack: str) -> set[str]:
        """The stacks whose EKS cluster a ``Custom::ClusterActive`` of ``stack`` waits for: not
        a stack dependency (both deploy side by side), but the model schedules them first."""
        names = {
            json.dumps(r["Properties"].get("ClusterName"))
            for r in self.deploy.templates[stack]["Resources"].values()
            if r["Type"] == "Custom::ClusterActive"
        }
        return {
            other
            for other, template in self.deploy.templates.items()
            if other != stack
            and any(
                r["Type"] == "AWS::EKS::Cluster"
                and json.dumps(r["Properties"].get("Name")) in names
                for r in template["Resources"].values()
            )
        }

    def _stack_order(self) -> list[str]:
        done: list[str] = []
        pending = list(self.deploy.templates)
        while pending:
            ready = [
                s for s in pending if self.deploy.dependencies[s] | self._waits_for(s) <= set(done)
            ]
            if not ready:
                raise ValueError(f"stack dependency cycle among {pending}")
            done.append(ready[0])
            pending.remove(ready[0])
        return done

    def _schedule_stack(self, stack: str, start: float, after: str) -> None:
        self.timeline.stacks[f"stack {stack}"] = Step(f"stack {stack}", start, start, after, stack)
        resources = self.deploy.templates[stack]["Resources"]
        pending = dict(resources)
        while pending:
            progressed = False
            for logical_id, resource in list(pending.items()):
                deps = (refs(resource.get("Properties", {})) | _depends_on(resource)) & set(
                    resources
                )
                names = [f"{stack}/{d}" for d in deps]
                if not all(n in self.timeline.steps for n in names):
                    continue
                ready = [(self.timeline.steps[n].end, n) for n in names]
                begin, last = _latest(ready, start, after)
                end = self._end(stack, logical_id, resource, begin)
                if end is None:
                    continue
                finish, waited = end
                self.timeline.steps[f"{stack}/{logical_id}"] = Step(
                    f"{stack}/{logical_id}", begin, finish, waited or last, stack
                )
                del pending[logical_id]
                progressed = True
            if not progressed:
                raise ValueError(f"cannot schedule {sorted(pending)} in {stack}")

    def _end(
        self, stack: str, logical_id: str, resource: Mapping[str, Any], begin: float
    ) -> tuple[float, str] | None:
        """When the resource is done, and what it waited for beyond its references (or "");
        None while something it watches is not scheduled yet."""
        rtype = resource["Type"]
        props = resource.get("Properties", {})
        if rtype == "AWS::EKS::Nodegroup":
            kind = "gpu" if "NVIDIA" in str(props.get("AmiType", "")) else "standard"
            return begin + NODEGROUP_MINUTES[kind], ""
        if rtype == "Custom::GpuCapacityWatch":
            watched = [
                n
                for n, r in self.deploy.templates[stack]["Resources"].items()
                if r["Type"] == "AWS::EKS::Nodegroup"
                and json.dumps(r["Properties"].get("NodegroupName"))
                == json.dumps(props.get("NodegroupName"))
            ]
            names = [f"{stack}/{n}" for n in watched]
            if not all(n in self.timeline.steps for n in names):
                return None
            return _latest([(self.timeline.steps[n].end, n) for n in names], begin + WATCH_POLL, "")
        if rtype == "Custom::ClusterActive":
            clusters = self._find(
                "AWS::EKS::Cluster",
                lambda r: (
                    json.dumps(r["Properties"].get("Name")) == json.dumps(props.get("ClusterName"))
                ),
            )
            if not clusters or not all(n in self.timeline.steps for n, _ in clusters):
                raise ValueError(f"{stack}/{logical_id} waits for a cluster the model lacks")
            return _latest(
                [(self.timeline.steps[n].end + CLUSTER_ACTIVE_POLL, n) for n, _ in clusters],
                begin + CLUSTER_ACTIVE_POLL,
                "",
            )
        if rtype == "Custom::RayServiceReadiness":
            if not self._cluster_side_ready():
                return None
            running = self._cluster_side()
            self.timeline.proven = f"{stack}/{logical_id}"
            return _latest([(running + PROOF, "serve app RUNNING")], begin + WATCH_POLL, "")
        return begin + self.durations.get(rtype, DEFAULT_DURATION), ""

    # Inside the cluster -------------------------------------------------------------------------

    def _find(self, rtype: str, match: Any) -> list[tuple[str, dict[str, Any]]]:
        return [
            (f"{stack}/{logical_id}", r)
            for stack, template in self.deploy.templates.items()
            for logical_id, r in template["Resources"].items()
            if r["Type"] == rtype and match(r)
        ]

    def _applied(self, kind: str, name: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """KubernetesResources holding an object of ``kind`` (and ``name``), with the object."""
        found = []
        for step_name, r in self._find("Custom::AWSCDK-EKS-KubernetesResource", lambda _: True):
            for obj in _manifest(r):
                if obj.get("kind") == kind and (name is None or obj["metadata"]["name"] == name):
                    found.append((step_name, obj))
        return found

    def _chart(self, chart: str) -> list[str]:
        return [
            n
            for n, _ in self._find(
                "Custom::AWSCDK-EKS-HelmChart", lambda r: r["Properties"].get("Release") == chart
            )
        ]

    def _nodegroups(self, role: str) -> list[tuple[str, dict[str, Any]]]:
        return self._find(
            "AWS::EKS::Nodegroup",
            lambda r: r["Properties"].get("Labels", {}).get("role") == role,
        )

    def _needed(self) -> list[str]:
        names = [n for n, _ in self._nodegroups("system") + self._nodegroups("gpu-worker")]
        names += [n for n, _ in self._applied("RayService")]
        names += [n for n, _ in self._applied("DaemonSet")]
        names += self._chart("kuberay-operator")
        names += self._chart("aws-efa-k8s-device-plugin") + self._chart("nvidia-device-plugin")
        return names

    def _cluster_side_ready(self) -> bool:
        return all(n in self.timeline.steps for n in self._needed())

    def _add(self, name: str, start: float, minutes: float, after: str) -> float:
        self.timeline.steps[name] = Step(name, start, start + minutes, after)
        return start + minutes

    def _launch_template_data(self, nodegroup: str, resource: Mapping[str, Any]) -> Any:
        stack = nodegroup.split("/")[0]
        template_ref = resource["Properties"].get("LaunchTemplate", {}).get("Id", {})
        lt_id = template_ref.get("Ref") if isinstance(template_ref, dict) else None
        lt = self.deploy.templates[stack]["Resources"].get(lt_id or "", {})
        return lt.get("Properties", {}).get("LaunchTemplateData", {})

    def _fast_pull(self, nodegroup: str, resource: Mapping[str, Any]) -> bool:
        """Whether the node's nodeadm config turns on SOCI parallel pull (FastImagePull)."""
        user_data = json.dumps(self._launch_template_data(nodegroup, resource).get("UserData", ""))
        return "FastImagePull: true" in user_data

    def _disk_mbps(self, nodegroup: str, resource: Mapping[str, Any]) -> float:
        data = self._launch_template_data(nodegroup, resource)
        if "RAID0" in json.dumps(data.get("UserData", "")):
            return NVME_MBPS
        for mapping in data.get("BlockDeviceMappings", []):
            ebs = mapping.get("Ebs", {})
            if ebs.get("VolumeType") == "gp3":
                return float(ebs.get("Throughput", GP3_BASELINE_MBPS))
        return GP3_BASELINE_MBPS

    def _pull_dlc(self, role: str, applied: list[tuple[float, str]]) -> tuple[float, str]:
        """The node of ``role`` pulls the Ray image once it exists and a manifest asks."""
        ((ng, resource),) = self._nodegroups(role)
        node = self.timeline.steps[ng]
        start, after = _latest([min(applied)], node.end, ng)
        fast = self._fast_pull(ng, resource)
        download = DLC_IMAGE_GB * 1000 / PULL_CEILING_MBPS / (SOCI_PULL_SPEEDUP if fast else 1)
        write = DLC_IMAGE_GB * DLC_UNPACKED_FACTOR * 1000 / self._disk_mbps(ng, resource)
        mode = ", SOCI parallel pull" if fast else ""
        name = (
            f"pull Ray image on the {role} node ({self._disk_mbps(ng, resource):.0f} MB/s disk"
            f"{mode})"
        )
        return self._add(name, start, max(download, write) / 60, after), name

    def _cluster_side(self) -> float:
        steps = self.timeline.steps
        ((rayservice, _),) = self._applied("RayService")
        prepull = self._applied("DaemonSet", "image-prepull")
        prefetch = self._applied("DaemonSet", "model-prefetch")
        (operator,) = self._chart("kuberay-operator")
        plugins = self._chart("aws-efa-k8s-device-plugin") + self._chart("nvidia-device-plugin")
        ray_applied = [(steps[rayservice].end, rayservice)]
        ray_applied += [(steps[n].end, n) for n, _ in prepull]
        system_pulled = self._pull_dlc("system", ray_applied)
        gpu_pulled = self._pull_dlc("gpu-worker", ray_applied)
        # The prefetch: its init containers' images, then the weights.
        ((gpu_ng, _),) = self._nodegroups("gpu-worker")
        weights_done: tuple[float, str] = (0.0, "")
        ray_images = {
            str(c.get("image")) for _, obj in prepull for c in _pod_spec(obj).get("containers", [])
        }
        for step_name, obj in prefetch:
            inits = _pod_spec(obj).get("initContainers", [])
            start, after = _latest([(steps[step_name].end, step_name)], steps[gpu_ng].end, gpu_ng)
            in_ray_image = any(str(c.get("image")) in ray_images for c in inits)
            if in_ray_image:
                # Same image as the pre-pull: containerd joins the pull under way.
                start, after = _latest([gpu_pulled], start, after)
            else:
                start = self._add("pull prefetch image", start, SMALL_IMAGE_MINUTES, after)
                after = "pull prefetch image"
            from_s3 = any(c.get("name") == "stage-model" for c in inits)
            if not from_s3 and not in_ray_image:
                start = self._add("install huggingface_hub", start, PIP_INSTALL_MINUTES, after)
                after = "install huggingface_hub"
            rate, source = (S3_MBPS, "S3") if from_s3 else (HF_MBPS, "Hugging Face")
            name = f"download weights from {source}"
            end = self._add(name, start, WEIGHTS_GB * 1000 / rate / 60, after)
            weights_done = (end, name)
        head_start, head_after = _latest(
            [(steps[rayservice].end, rayservice), (steps[operator].end, operator), system_pulled],
            0.0,
            "",
        )
        head = self._add("Ray head up", head_start, HEAD_START, head_after)
        worker_inputs = [
            (steps[rayservice].end, rayservice),
            (steps[operator].end, operator),
            gpu_pulled,
            weights_done,
            *[(steps[p].end, p) for p in plugins],
        ]
        worker_start, worker_after = _latest(worker_inputs, 0.0, "")
        workers = self._add("vLLM engines up", worker_start, ENGINE_START, worker_after)
        start, after = _latest([(head, "Ray head up"), (workers, "vLLM engines up")], 0.0, "")
        return self._add("serve app RUNNING", start, SERVE_DEPLOY, after)


# -- scale-out: a new GPU node until its engine serves ------------------------------------------

# EC2 launch, NVIDIA AMI boot (driver, EFA, RAID0) and kubelet Ready for one instance the Cluster
# Autoscaler adds to the existing Auto Scaling group: the node group's 4.5 minutes less the
# managed node group's own creation and EKS's wait for every node (docs/scaling.md: 3-4 min).
SCALE_OUT_NODE_JOIN = 3.0
SCALE_OUT_DEVICE_PLUGINS = 0.3  # the EFA and NVIDIA plugin DaemonSets' pods on the new node
SCALE_OUT_REPLICA_READY = 0.5  # the replica joins Serve and passes its health check
# On a warm spare (gpuWarmSpareNodes): the scheduler preempts the placeholder (grace period 0)
# and starts the worker pod there; the image is on the node already (pre-pull), so this is the
# pod's sandbox, the device plugins' allocation and KubeRay's wait-gcs-ready.
SCALE_OUT_SPARE_POD_START = 0.2
SCALE_OUT_JOIN_STEP = "node launches, boots and joins"
SCALE_OUT_ENGINE_STEP = "vLLM engine loads the weights and starts"


@dataclass(frozen=True)
class ScaleOut:
    """The modelled minutes from a new GPU node's launch to its engine serving."""

    steps: tuple[tuple[str, float, float], ...]  # (what, start, end)
    # With warm spares: from the worker pod's creation to its replica serving on a spare.
    spare_steps: tuple[tuple[str, float, float], ...] = ()

    @property
    def minutes(self) -> float:
        return max(end for _, _, end in self.steps)

    @property
    def spare_minutes(self) -> float | None:
        """Minutes until a replica on a warm spare serves; None without spares."""
        return max(end for _, _, end in self.spare_steps) if self.spare_steps else None


def scale_out(deploy: Deploy, *, weights_in_s3: bool | None = None) -> ScaleOut:
    """The scale-out of the synthesized app: its GPU node's pull mode and disk and its weights'
    source, with the deploy's rates (:func:`scale_out_model`). With warm spares
    (``gpuWarmSpareNodes``: the placeholders' Deployment is applied) also ``spare_steps``.
    ``weights_in_s3`` models the weights' source as given (True: staged in S3, ``modelS3Uri``;
    False: Hugging Face) instead of the app's own."""
    model = _Model(deploy, concurrency=4)
    ((nodegroup, resource),) = model._nodegroups("gpu-worker")
    from_s3 = any(
        c.get("name") == "stage-model"
        for _, obj in model._applied("DaemonSet", "model-prefetch")
        for c in _pod_spec(obj).get("initContainers", [])
    )
    return scale_out_model(
        fast_pull=model._fast_pull(nodegroup, resource),
        disk_mbps=model._disk_mbps(nodegroup, resource),
        weights_in_s3=from_s3 if weights_in_s3 is None else weights_in_s3,
        warm_spares=bool(model._applied("Deployment", "gpu-warm-spare")),
    )


def scale_out_model(
    *, fast_pull: bool, disk_mbps: float, weights_in_s3: bool, warm_spares: bool = False
) -> ScaleOut:
    """The modelled minutes from a new GPU node's launch to its engine serving, for a node
    whose nodeadm config has ``FastImagePull`` (``fast_pull``), whose image and weights land
    on a disk of ``disk_mbps``, and whose weights come from S3 (``weights_in_s3``) or Hugging
    Face. The node joins; the pre-pull and prefetch DaemonSets and the device plugins start on
    it at once (they exist already), in parallel; the engine starts when the image, the
    weights and the plugins are there. With ``warm_spares`` also ``spare_steps``: the new
    worker pod on a spare, which already holds the image and the weights, so only the pod
    start, the engine start and Serve remain. ``ray-pd-eks coldstart`` prints these steps
    beside the ones a real node took."""
    download = DLC_IMAGE_GB * 1000 / PULL_CEILING_MBPS / (SOCI_PULL_SPEEDUP if fast_pull else 1)
    write = DLC_IMAGE_GB * DLC_UNPACKED_FACTOR * 1000 / disk_mbps
    pull = max(download, write) / 60
    joined = SCALE_OUT_NODE_JOIN
    if weights_in_s3:
        weights_start, source, rate = joined + SMALL_IMAGE_MINUTES, "S3", S3_MBPS
    else:
        weights_start = joined + SMALL_IMAGE_MINUTES + PIP_INSTALL_MINUTES
        source, rate = "Hugging Face", HF_MBPS
    weights_end = weights_start + WEIGHTS_GB * 1000 / rate / 60
    plugins_end = joined + SCALE_OUT_DEVICE_PLUGINS
    mode = "SOCI parallel pull" if fast_pull else "containerd's default pull"
    engine_start = max(joined + pull, weights_end, plugins_end)
    engine_end = engine_start + ENGINE_START
    spare: tuple[tuple[str, float, float], ...] = ()
    if warm_spares:
        # The spare's node joined and warmed up long before: image and weights on its NVMe.
        pod = SCALE_OUT_SPARE_POD_START
        spare = (
            ("worker pod preempts the placeholder and starts", 0.0, pod),
            (SCALE_OUT_ENGINE_STEP, pod, pod + ENGINE_START),
            (
                "replica serves",
                pod + ENGINE_START,
                pod + ENGINE_START + SCALE_OUT_REPLICA_READY,
            ),
        )
    return ScaleOut(
        (
            (SCALE_OUT_JOIN_STEP, 0.0, joined),
            (f"pull Ray image ({mode})", joined, joined + pull),
            (f"download weights from {source}", weights_start, weights_end),
            ("EFA and NVIDIA device plugins", joined, plugins_end),
            (SCALE_OUT_ENGINE_STEP, engine_start, engine_end),
            ("replica serves", engine_end, engine_end + SCALE_OUT_REPLICA_READY),
        ),
        spare,
    )


def schedule(
    deploy: Deploy, *, concurrency: int = 4, control_plane_minutes: float | None = None
) -> Timeline:
    """The modelled deploy. ``concurrency`` 1 deploys one stack at a time (the CDK CLI's
    default); more lets independent stacks deploy side by side (``--concurrency``, and CDK
    Pipelines). ``control_plane_minutes``: the EKS cluster's creation, else the model's
    ``DURATIONS`` figure."""
    return _Model(deploy, concurrency, control_plane_minutes).run()


def report(timeline: Timeline, *, title: str) -> list[str]:
    """The critical path as lines: when each step starts and ends, in minutes."""
    lines = [
        f"{title}: endpoint proven after {timeline.endpoint_minutes:.1f} min "
        f"(all stacks done after {timeline.deploy_minutes:.1f} min)",
        "  critical path (start - end, minutes):",
    ]
    for step in timeline.critical_path():
        lines.append(f"  {step.start:5.1f} - {step.end:5.1f}  {step.name}")
    return lines
