"""A test-side evaluator of the Kubernetes Pod Security Standards, as the PodSecurity admission
plugin applies them to a pod spec (``k8s.io/pod-security-admission/policy``, policy version
``latest`` in Kubernetes 1.35/1.36).

``violations(spec, level, annotations)`` lists, for ``level`` ``baseline`` or ``restricted``,
every check the pod fails, named like the plugin's check ids (``hostPathVolumes``,
``privileged``, ...); ``privileged`` admits everything. Every container counts: init
containers as much as the others. Levels are cumulative: ``restricted`` runs the baseline
checks too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

LEVELS = ("privileged", "baseline", "restricted")
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_NOT_VOLUME_SOURCE = frozenset({"name"})


def containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every container the plugin checks: init, regular and ephemeral."""
    return [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]


def violations(
    spec: Mapping[str, Any], level: str, annotations: Mapping[str, str] | None = None
) -> list[str]:
    """The checks ``spec`` fails at ``level`` (sorted, one entry per check and container)."""
    if level not in LEVELS:
        raise ValueError(f"Pod Security level {level!r} is not one of {LEVELS}")
    if level == "privileged":
        return []
    found = _baseline(spec, annotations or {})
    if level == "restricted":
        found += _restricted(spec)
    return sorted(found)


def _sc(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return node.get("securityContext") or {}


def _baseline(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> list[str]:
    found: list[str] = []
    pod_sc = _sc(spec)
    every = containers(spec)
    # hostProcess
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess") or any(
        (_sc(c).get("windowsOptions") or {}).get("hostProcess") for c in every
    ):
        found.append("hostProcess")
    # host namespaces
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            found.append(f"hostNamespaces:{key}")
    for c in every:
        name = c.get("name", "?")
        sc = _sc(c)
        if sc.get("privileged"):
            found.append(f"privileged:{name}")
        added = set((sc.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            found.append(f"capabilities_baseline:{name}:{','.join(sorted(added))}")
        if any((p.get("hostPort") or 0) != 0 for p in c.get("ports") or []):
            found.append(f"hostPorts:{name}")
        if sc.get("procMount", "Default") != "Default":
            found.append(f"procMount:{name}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append(f"seccompProfile_baseline:{name}")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            found.append(f"appArmorProfile:{name}")
        found += _selinux(sc.get("seLinuxOptions"), name)
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            found.append(f"hostPathVolumes:{volume.get('name')}")
    if (pod_sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        found.append("seccompProfile_baseline:pod")
    if (pod_sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        found.append("appArmorProfile:pod")
    found += _selinux(pod_sc.get("seLinuxOptions"), "pod")
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            found.append(f"sysctls:{sysctl.get('name')}")
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            found.append(f"appArmorProfile:{key.rsplit('/', 1)[1]}")
    return found


def _selinux(options: Mapping[str, Any] | None, where: str) -> list[str]:
    if not options:
        return []
    if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
        return [f"seLinuxOptions:{where}"]
    return []


def _restricted(spec: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    pod_sc = _sc(spec)
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - _NOT_VOLUME_SOURCE
        if kinds - RESTRICTED_VOLUMES:
            found.append(f"restrictedVolumes:{volume.get('name')}")
    pod_non_root = pod_sc.get("runAsNonRoot")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_sc.get("runAsUser") == 0:
        found.append("runAsUser:pod")
    for c in containers(spec):
        name = c.get("name", "?")
        sc = _sc(c)
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"allowPrivilegeEscalation:{name}")
        non_root = sc.get("runAsNonRoot", pod_non_root)
        if non_root is not True:
            found.append(f"runAsNonRoot:{name}")
        if sc.get("runAsUser") == 0:
            found.append(f"runAsUser:{name}")
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"seccompProfile_restricted:{name}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            found.append(f"capabilities_restricted:{name}:drop")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"capabilities_restricted:{name}:add")
    return found


def enforced_levels(namespaces: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Namespace name -> ``pod-security.kubernetes.io/enforce`` (``privileged`` when unset,
    the plugin's default)."""
    return {
        ns["metadata"]["name"]: (ns["metadata"].get("labels") or {}).get(
            "pod-security.kubernetes.io/enforce", "privileged"
        )
        for ns in namespaces
    }
