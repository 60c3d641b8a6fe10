"""The states that waiting cannot fix: ``terminal_failure`` turns the nodes, the RayService,
the pods and KubeRay's warnings into the message that fails the deploy at once, or None while
waiting can still help. Time-based judgements take ``now`` and the wait's start explicitly:
nothing survives between polls but the event.
"""

from __future__ import annotations

from collections.abc import Sequence

import checks
from pd_lambda.settings_hint import set_hint
from properties import Props

# A GPU pod still failing to schedule this long after the last GPU node turned Ready is not
# waiting for a device plugin to catch up; the scheduler's message is the diagnosis.
UNSCHEDULABLE_GRACE_SECONDS = 180
# Kubelet retries a failed pull with a backoff capped at 5 minutes; a 20 GB image can meet
# registry throttling or a reset. Only a pull still failing this long after its first failure
# event is terminal.
IMAGE_PULL_GRACE_SECONDS = 600
# A RayCluster/RayService warning (pod creation refused) is terminal once it has repeated and
# was seen during this wait: KubeRay retries with a backoff, so a refusal that persists repeats.
OBJECT_WARNING_MIN_COUNT = 2

# What a failed NIXL memory registration leaves in Serve's message: vLLM 0.26 registers the KV
# cache at engine start (nixl/base_worker.py, register_kv_caches -> nixl_wrapper.
# register_memory), and NIXL 1.3.1's Python API raises the binding's nixlBackendError
# (NIXL_ERR_BACKEND) when the LIBFABRIC plugin's fi_mr_reg fails ("Failed to register memory
# on rail", "fi_mr_reg failed" in libplugin_LIBFABRIC.so).
NIXL_REGISTRATION_SIGNS = ("nixlBackendError", "NIXL_ERR_BACKEND", "register_memory", "fi_mr_reg")


def _nixl_registration_failed(message: str) -> bool:
    return any(sign in (message or "") for sign in NIXL_REGISTRATION_SIGNS)


def efa_privilege_hint(props: Props) -> str:
    """What to add to a failure of the EFA path when the GPU workers run unprivileged: the
    setting that restores the default. Empty when they run privileged or without EFA."""
    if props.workers_privileged or props.kv_backend != "LIBFABRIC" or props.serving_mode != "pd":
        return ""
    return (
        "; the GPU workers run without privileged (gpuWorkerPrivileged=false), and NIXL may "
        "fail to register GPU memory with EFA without it (libfabric's fi_mr_reg pins it): "
        f"restore the default with {set_hint('gpuWorkerPrivileged', 'true')}, then redeploy"
    )


def terminal_failure(
    props: Props,
    nodes: checks.GpuNodes,
    state: checks.RayServiceState,
    problems: list[checks.PodProblem],
    now: float,
    *,
    warnings: Sequence[checks.ObjectWarning] = (),
    started: float | None = None,
) -> str | None:
    """The first state that waiting cannot fix, as a message; None if there is none.

    The RayService's own verdicts (a terminal condition, ``DEPLOY_FAILED``) count only when its
    status describes the current spec (``status.observedGeneration`` equal to
    ``metadata.generation``): right after an update KubeRay may still show the previous
    generation's failure, which the new spec may well fix.

    An ``UNHEALTHY`` app is never terminal here; it stays pending and the timeout message
    reports it with Serve's message and the deployments' statuses. Ray Serve 2.58 turns every
    failure while a deployment is being deployed (replica start-up, health check, deployment
    actor) into ``DEPLOY_FAILED``, which fails at once; ``UNHEALTHY`` means a deployment that
    was HEALTHY (or scaling) lost replicas, which Serve's controller is already replacing, or
    the controller met an internal error (``DeploymentStatusInfo.handle_transition`` in
    ``ray/serve/_private/common.py``). How long
    it has been unhealthy is not knowable: KubeRay v1.7's ``ray.io/v1`` ``AppStatus`` holds only
    ``status``, ``message`` and ``serveDeploymentStatuses`` (``healthLastUpdateTime`` exists only
    in the deprecated ``v1alpha1`` schema, and the v1.7 controller sets it nowhere), and a
    Provider's ``is_complete`` keeps nothing between polls but the event. A replica that
    crashes its pod is caught by the pod checks below (``CrashLoopBackOff``).

    ``warnings`` are the RayService's and its RayClusters' Warning events; one whose reason says
    the API server refused an object (``checks.OBJECT_FAILURE_REASONS``) is terminal once it has
    repeated and was last seen after ``started`` (the wait's start), so neither a one-off
    refusal nor an event left by an earlier deploy fails this one.
    """
    app = props.app_name
    if state.generation_current:
        if state.terminal_reason:
            return state.terminal_message
        if state.app_status == "DEPLOY_FAILED":
            registration = _nixl_registration_failed(state.app_message)
            return (
                f"Serve app {app} is DEPLOY_FAILED: {state.app_message or 'no message'}"
                + _deployment_detail(state)
                + (
                    efa_privilege_hint(props)
                    if registration
                    else "; fix serveConfigV2 or the image, then redeploy"
                )
            )
    if not state.running:
        for warning in warnings:
            if _object_warning_is_terminal(warning, started):
                return (
                    f"KubeRay could not create the Ray cluster: {warning.describe()}; the API "
                    "server refused it (Pod Security admission of the namespace, a "
                    "ResourceQuota or LimitRange, or an admission webhook) or the spec is "
                    "invalid: fix the policy or the RayService, then redeploy"
                )
    for problem in problems:
        if problem.reason == "Unschedulable":
            if not _unschedulable_is_terminal(problem, nodes, now):
                continue
            return (
                f"Ray pod cannot be scheduled: {problem.describe()}; compare the pod's requests "
                f"({checks.GPU_RESOURCE}, {checks.EFA_RESOURCE}, cpu, memory) with the nodes' "
                "allocatable resources and the node selector"
            )
        if problem.reason in checks.IMAGE_PULL_REASONS:
            # ErrImagePull is one failed attempt, which the kubelet retries; a pull that keeps
            # failing spends its time in ImagePullBackOff between attempts. Without a pull
            # failure event there is no telling how long it has failed: keep waiting.
            if problem.reason != "ImagePullBackOff" or problem.since is None:
                continue
            failing_for = now - problem.since.timestamp()
            if failing_for < IMAGE_PULL_GRACE_SECONDS:
                continue
            return (
                f"Ray pod cannot pull its image for {failing_for:.0f} s (first failure "
                f"{problem.since.isoformat()}): {problem.describe()}; check the image URI and "
                "tag, that the node role may pull it, and the registry's throttling"
            )
        hint = {
            "CrashLoopBackOff": (
                f"read its previous log: kubectl logs -n {props.namespace} {problem.pod} "
                f"-c {problem.container or '<container>'} --previous"
            ),
            "CreateContainerConfigError": "a referenced Secret, ConfigMap or key is missing",
        }.get(problem.reason, "")
        return f"Ray pod stuck: {problem.describe()}" + (f"; {hint}" if hint else "")
    return None


def _object_warning_is_terminal(warning: checks.ObjectWarning, started: float | None) -> bool:
    if warning.reason not in checks.OBJECT_FAILURE_REASONS:
        return False
    if warning.count < OBJECT_WARNING_MIN_COUNT and not warning.reason.startswith("Invalid"):
        return False
    if started is None or warning.last_seen is None:
        return started is None
    return warning.last_seen.timestamp() >= started


def _unschedulable_is_terminal(
    problem: checks.PodProblem, nodes: checks.GpuNodes, now: float
) -> bool:
    """Unschedulable is normal while nodes join and device plugins start; it is final once the
    scheduler still refuses a GPU pod well after every expected GPU node was usable, or a CPU
    pod after the grace period."""
    if problem.observed_at is None:
        return False
    if problem.requests_gpu:
        ready_since = nodes.ready_since
        if not nodes.ok or ready_since is None:
            return False
        return (problem.observed_at - ready_since).total_seconds() >= UNSCHEDULABLE_GRACE_SECONDS
    since = problem.since or problem.observed_at
    return now - since.timestamp() >= UNSCHEDULABLE_GRACE_SECONDS


def _deployment_detail(state: checks.RayServiceState) -> str:
    bad = [
        f"{d.name}={d.status}" + (f" ({d.message[:300]})" if d.message else "")
        for d in state.deployments
        if d.status != "HEALTHY"
    ]
    return f"; deployments: {'; '.join(bad)}" if bad else ""
