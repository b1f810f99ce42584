"""The Pod Security Standards' `restricted` profile (Kubernetes 1.30, policy version
`latest`), as the API server's PodSecurity admission checks a pod template: every check
of `baseline` and of `restricted`, from
https://kubernetes.io/docs/concepts/security/pod-security-standards/ (the checks of
k8s.io/pod-security-admission/policy). No Python package implements them, so this module
does, for the tests; each violation is a line naming the check and the field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

RESTRICTED_VOLUME_TYPES: Final = frozenset(
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
BASELINE_CAPABILITIES: Final = frozenset(
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
SAFE_SYSCTLS: Final = frozenset(
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
SELINUX_TYPES: Final = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
APPARMOR_TYPES: Final = frozenset({None, "RuntimeDefault", "Localhost"})
_CONTAINER_LISTS: Final = ("initContainers", "containers", "ephemeralContainers")


def _containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for key in _CONTAINER_LISTS:
        for index, container in enumerate(pod.get(key) or []):
            yield f"{key}[{index}]", container


def _baseline(pod: Mapping[str, Any]) -> Iterator[str]:
    pod_context = pod.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            yield f"host namespaces: {field} is true"
    if (pod_context.get("windowsOptions") or {}).get("hostProcess"):
        yield "hostProcess: securityContext.windowsOptions.hostProcess is true"
    for volume in pod.get("volumes") or []:
        if "hostPath" in volume:
            yield f"hostPath volumes: volume {volume.get('name')!r}"
    for sysctl in pod_context.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield f"sysctls: {sysctl.get('name')!r} is not a safe sysctl"
    if (pod_context.get("seccompProfile") or {}).get("type") == "Unconfined":
        yield "seccomp: securityContext.seccompProfile.type is Unconfined"
    if (pod_context.get("appArmorProfile") or {}).get("type") not in APPARMOR_TYPES:
        yield "AppArmor: securityContext.appArmorProfile.type"
    yield from _selinux(pod_context.get("seLinuxOptions") or {}, "securityContext")
    for where, container in _containers(pod):
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            yield f"privileged: {where}.securityContext.privileged is true"
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            yield f"hostProcess: {where}.securityContext.windowsOptions.hostProcess"
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            yield f"capabilities: {where} adds {sorted(added - BASELINE_CAPABILITIES)}"
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                yield f"host ports: {where} uses hostPort {port['hostPort']}"
        if context.get("procMount", "Default") != "Default":
            yield f"/proc mount type: {where}.securityContext.procMount"
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"seccomp: {where}.securityContext.seccompProfile.type is Unconfined"
        if (context.get("appArmorProfile") or {}).get("type") not in APPARMOR_TYPES:
            yield f"AppArmor: {where}.securityContext.appArmorProfile.type"
        yield from _selinux(context.get("seLinuxOptions") or {}, f"{where}.securityContext")


def _selinux(options: Mapping[str, Any], where: str) -> Iterator[str]:
    if options.get("type", "") not in SELINUX_TYPES:
        yield f"SELinux: {where}.seLinuxOptions.type {options['type']!r}"
    for field in ("user", "role"):
        if options.get(field):
            yield f"SELinux: {where}.seLinuxOptions.{field} is set"


def _restricted(pod: Mapping[str, Any]) -> Iterator[str]:
    pod_context = pod.get("securityContext") or {}
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            yield f"volume types: volume {volume.get('name')!r} is {sorted(kinds)}"
    if pod_context.get("runAsUser") == 0:
        yield "running as non-root user: securityContext.runAsUser is 0"
    pod_non_root = pod_context.get("runAsNonRoot")
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    for where, container in _containers(pod):
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            yield f"privilege escalation: {where} does not set allowPrivilegeEscalation false"
        non_root = context.get("runAsNonRoot", pod_non_root)
        if non_root is not True:
            yield f"running as non-root: {where} may run as root (runAsNonRoot is not true)"
        if context.get("runAsUser") == 0:
            yield f"running as non-root user: {where}.securityContext.runAsUser is 0"
        seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            yield f"seccomp: {where} has no RuntimeDefault or Localhost seccomp profile"
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield f"capabilities: {where} does not drop ALL"
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            yield f"capabilities: {where} adds {sorted(added)}"


def restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    """What PodSecurity admission at `restricted` refuses in this pod spec; empty: none."""
    return [*_baseline(pod), *_restricted(pod)]


def pod_specs(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod specs of a rendered Job or JobSet (none for other kinds)."""
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]["spec"]]
    if obj["kind"] == "JobSet":
        return [
            replicated["template"]["spec"]["template"]["spec"]
            for replicated in obj["spec"]["replicatedJobs"]
        ]
    return []
