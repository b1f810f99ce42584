"""`job.podTemplate` onto the rendered pod template: the strategic merge and its checks.

`overlay(template, override, ...)` returns the merged pod template, or the problems that
stop it (field paths under `job.podTemplate`), so that `render` raises one LauncherError
before any object exists. The merge follows Kubernetes' strategic merge patch for a pod:

- maps are merged key by key; a scalar (or a list without a merge key, e.g.
  `capabilities.add`, `envFrom`) replaces the rendered value; a null removes a key;
- lists of named items are merged by name (`containers`, `volumes`, `imagePullSecrets`),
  volume mounts by `mountPath` (as Kubernetes does: one volume can be mounted at several
  paths); an item of the template is merged into the rendered item of the same key, or
  appended;
- `env` is merged by name too, but an entry replaces the rendered variable of its name
  whole (value and valueFrom are one choice), as `job.env` entries do;
- `tolerations` are added to the rendered ones (a pod template cannot drop the
  `nvidia.com/gpu` toleration).

Refused, since the launcher owns them (besides what `trainplan.api.podtemplate` refuses):
an `nvidia.com/gpu` amount other than the plan's GPUs per pod, and a volume name or a
mount path that the launcher renders (`/dev/shm`, `/checkpoints` with a claim, the
DeepSpeed config). With `hostNetwork: true` the pod gets `dnsPolicy:
ClusterFirstWithHostNet`, so that the rendezvous host still resolves.

The merged pod is then checked: each mount names a volume of the pod, requests do not
exceed limits (extended resources such as `rdma/*`: equal, with a limit), a container
that must not run as root is not given user 0, and the whole template passes the
Kubernetes 1.30 pod schema of `kubernetes-validate` (strict: unknown fields are errors;
the first schema error is reported). Pure but for that schema, read from the package data
of `kubernetes-validate` (no cluster, no network); imported only when a spec has a
podTemplate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from trainplan.api.podtemplate import TRAINER_CONTAINER, PodTemplateOverride
from trainplan.planner.catalog import GPU_RESOURCES

SCHEMA_VERSION: Final = "1.30.0"
"""The Kubernetes version whose pod schema a merged pod template must pass."""

ROOT: Final = "job.podTemplate"
HOST_NETWORK_DNS_POLICY: Final = "ClusterFirstWithHostNet"

Path = tuple[str | int, ...]

_MERGE_KEYS: Final[Mapping[tuple[str, ...], str]] = {
    ("spec", "containers"): "name",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "containers", "*", "volumeMounts"): "mountPath",
}
"""Lists whose items are merged by a key (Kubernetes' patchMergeKey)."""
_REPLACE_KEYS: Final[Mapping[tuple[str, ...], str]] = {
    ("spec", "containers", "*", "env"): "name",
}
"""Lists whose items replace the rendered item of the same key whole."""
_UNION: Final = frozenset({("spec", "tolerations")})
"""Lists whose items are added to the rendered ones, once each."""

_DECIMAL_SUFFIXES: Final[Mapping[str, Decimal]] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_BINARY_SUFFIXES: Final[Mapping[str, Decimal]] = {
    suffix: Decimal(1024) ** power
    for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), start=1)
}
_QUANTITY: Final = re.compile(r"\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([a-zA-Z]*)((?:[eE][-+]?[0-9]+)?)")
_PLAIN_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def quantity_value(text: str) -> Decimal | None:
    """The value of a Kubernetes quantity ("500m" is 0.5, "1Gi" 2^30), None if unreadable."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return None
    number, suffix, exponent = match.groups()
    try:
        if exponent:
            return None if suffix else Decimal(number + exponent)
        factor = _DECIMAL_SUFFIXES.get(suffix, _BINARY_SUFFIXES.get(suffix))
        return None if factor is None else Decimal(number) * factor
    except InvalidOperation:
        return None


def format_path(path: Sequence[str | int]) -> str:
    """`job.podTemplate` and a path below it: `.key`, `[index]`, `[dotted.or/slashed]`."""
    text = ROOT
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            text += f".{part}"
        else:
            text += f"[{part}]"
    return text


def _pattern(path: Sequence[str | int]) -> tuple[str, ...]:
    return tuple("*" if isinstance(part, int) else part for part in path)


def _clean(value: Any) -> Any:
    """`value` without the nulls of its maps (a null removes a key; nothing to remove)."""
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_clean(item) for item in value]
    return value


def strategic_merge(base: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """`patch` merged onto `base` by the rules of this module; neither is changed."""
    if isinstance(patch, dict):
        merged = dict(base) if isinstance(base, dict) else {}
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = strategic_merge(merged.get(key), value, (*path, key))
        return merged
    if not isinstance(patch, list):
        return patch
    items = list(base) if isinstance(base, list) else []
    if path in _UNION:
        for item in map(_clean, patch):
            if item not in items:
                items.append(item)
        return items
    key = _MERGE_KEYS.get(path) or _REPLACE_KEYS.get(path)
    if key is None:
        return _clean(patch)
    item_path = (*path, "*")
    for item in patch:
        wanted = item.get(key) if isinstance(item, dict) else None
        index = next(
            (
                position
                for position, old in enumerate(items)
                if wanted is not None and isinstance(old, dict) and old.get(key) == wanted
            ),
            None,
        )
        if index is None:
            items.append(_clean(item))
        elif path in _MERGE_KEYS:
            items[index] = strategic_merge(items[index], item, item_path)
        else:
            items[index] = _clean(item)
    return items


def _same_item(key: str | None, candidate: Any, item: Any) -> bool:
    """Whether `candidate` (of a patch) became `item` (of the merged list)."""
    if key is None:
        return bool(_clean(candidate) == item)
    return (
        isinstance(item, dict)
        and isinstance(candidate, dict)
        and candidate.get(key) == item.get(key)
    )


def patch_path(path: Sequence[str | int], merged: Any, patch: Any) -> tuple[Path, bool]:
    """The part of `path` (a path in the merged template) that the patch wrote, in the
    patch's own indices, and whether that is all of `path`."""
    walked: list[str | int] = []
    for part in path:
        if isinstance(part, str):
            if not (isinstance(merged, dict) and isinstance(patch, dict) and part in patch):
                return tuple(walked), False
            merged, patch = merged.get(part), patch[part]
        else:
            if not (isinstance(merged, list) and isinstance(patch, list) and part < len(merged)):
                return tuple(walked), False
            item = merged[part]
            pattern = _pattern(walked)
            key = _MERGE_KEYS.get(pattern) or _REPLACE_KEYS.get(pattern)
            found = next(
                (
                    position
                    for position, candidate in enumerate(patch)
                    if _same_item(key, candidate, item)
                ),
                None,
            )
            if found is None:
                return tuple(walked), False
            merged, patch = item, patch[found]
            walked.append(found)
            continue
        walked.append(part)
    return tuple(walked), True


def _trainer_index(spec: Mapping[str, Any]) -> int:
    containers = spec.get("containers", [])
    return next(
        position
        for position, container in enumerate(containers)
        if container.get("name") == TRAINER_CONTAINER
    )


def _owned_problems(
    template: Mapping[str, Any], override: PodTemplateOverride, gpus_per_pod: int
) -> list[tuple[str, str]]:
    """What the pod template sets that the rendered pod owns."""
    problems: list[tuple[str, str]] = []
    spec = template["spec"]
    patch = override.spec
    rendered_volumes = [volume["name"] for volume in spec.get("volumes", [])]
    for position, volume in enumerate(patch.volumes):
        if volume["name"] in rendered_volumes:
            problems.append(
                (
                    format_path(("spec", "volumes", position)),
                    f"volume {volume['name']!r} is rendered by trainplan (/dev/shm from "
                    f"job.shmSize, checkpoints from job.checkpointVolumeClaim, the DeepSpeed "
                    f"config); name yours otherwise",
                )
            )
    trainer = override.trainer
    if trainer is None:
        return problems
    container = spec["containers"][_trainer_index(spec)]
    rendered_paths = [mount["mountPath"] for mount in container.get("volumeMounts", [])]
    for position, mount in enumerate(trainer.volume_mounts):
        if mount["mountPath"] in rendered_paths:
            problems.append(
                (
                    format_path(("spec", "containers", 0, "volumeMounts", position)),
                    f"{mount['mountPath']} is mounted by trainplan (job.shmSize, "
                    f"job.checkpointVolumeClaim, the DeepSpeed config); mount yours elsewhere",
                )
            )
    if trainer.resources is not None:
        for part, amounts in (
            ("limits", trainer.resources.limits),
            ("requests", trainer.resources.requests),
        ):
            for resource in GPU_RESOURCES.values():
                wanted = amounts.get(resource)
                if wanted is not None and quantity_value(wanted) != gpus_per_pod:
                    problems.append(
                        (
                            format_path(("spec", "containers", 0, "resources", part, resource)),
                            f"{wanted!r} contradicts the plan's {gpus_per_pod} GPUs per pod;"
                            " leave it out, the launcher requests the plan's GPUs",
                        )
                    )
    return problems


def _mount_problems(
    spec: Mapping[str, Any], container: Mapping[str, Any], override: PodTemplateOverride
) -> list[tuple[str, str]]:
    trainer = override.trainer
    if trainer is None:
        return []
    volumes = [volume.get("name") for volume in spec.get("volumes", [])]
    return [
        (
            format_path(("spec", "containers", 0, "volumeMounts", position)),
            f"mounts volume {mount['name']!r}, which the pod does not have (its volumes: "
            f"{', '.join(map(str, volumes))})",
        )
        for position, mount in enumerate(trainer.volume_mounts)
        if mount["name"] not in volumes
    ]


def _is_extended(resource: str) -> bool:
    """An extended resource (`nvidia.com/gpu`, `rdma/...`): a domain outside kubernetes.io."""
    domain, slash, _ = resource.partition("/")
    return bool(slash) and domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def _resource_problems(
    container: Mapping[str, Any], override: PodTemplateOverride
) -> list[tuple[str, str]]:
    trainer = override.trainer
    if trainer is None or trainer.resources is None:
        return []
    resources = container.get("resources", {})
    limits, requests = resources.get("limits", {}), resources.get("requests", {})
    problems: list[tuple[str, str]] = []
    where = format_path(("spec", "containers", 0, "resources"))
    for name in sorted(set(limits) | set(requests)):
        limit, request = limits.get(name), requests.get(name)
        if _is_extended(name):
            if request is not None and limit is None:
                problems.append((where, f"{name}: an extended resource needs a limit"))
            elif request is not None and quantity_value(request) != quantity_value(limit):
                problems.append(
                    (
                        where,
                        f"{name}: an extended resource's request ({request}) must equal its "
                        f"limit ({limit})",
                    )
                )
            continue
        if limit is None or request is None:
            continue
        request_value, limit_value = quantity_value(request), quantity_value(limit)
        if request_value is not None and limit_value is not None and request_value > limit_value:
            problems.append((where, f"{name}: the request ({request}) exceeds the limit ({limit})"))
    return problems


def _root_problems(
    spec: Mapping[str, Any], container: Mapping[str, Any], override: PodTemplateOverride
) -> list[tuple[str, str]]:
    """A container that must run as non-root given user 0: the kubelet refuses to start it."""
    pod_context = spec.get("securityContext", {})
    context = container.get("securityContext", {})
    non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
    user = context.get("runAsUser", pod_context.get("runAsUser"))
    if non_root is not True or user != 0:
        return []
    trainer = override.trainer
    in_container = (
        trainer is not None
        and trainer.security_context is not None
        and ("runAsUser" in trainer.security_context or "runAsNonRoot" in trainer.security_context)
    )
    path: Path = (
        ("spec", "containers", 0, "securityContext")
        if in_container
        else ("spec", "securityContext")
    )
    return [
        (
            format_path(path),
            "runAsUser 0 is root while runAsNonRoot is true (job.securityContext or the pod "
            "template): the kubelet would not start the container; set runAsNonRoot: false "
            "as well, or a non-zero user",
        )
    ]


def _schema_problem(
    merged: Mapping[str, Any], patch: Mapping[str, Any], name: str, namespace: str
) -> tuple[str, str] | None:
    """The first error of the merged template against the Kubernetes pod schema."""
    import kubernetes_validate

    document = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "template": merged,
    }
    try:
        kubernetes_validate.validate(document, SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        full = list(error.path)[1:]  # below `template`
        walked, complete = patch_path(full, merged, patch)
        version = SCHEMA_VERSION.rsplit(".", 1)[0]
        message = f"{error.message} (the Kubernetes {version} pod schema)"
        if not complete:
            rendered = format_path(full).removeprefix(ROOT).lstrip(".")
            message += f", at {rendered or 'the pod template'} of the merged pod"
        return format_path(walked), message
    return None


def overlay(
    template: Mapping[str, Any],
    override: PodTemplateOverride,
    *,
    gpus_per_pod: int,
    name: str,
    namespace: str,
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The rendered pod `template` with `override` merged onto it, and the problems that
    stop it (empty when it can be created). `name` and `namespace` are the workload's."""
    problems = _owned_problems(template, override, gpus_per_pod)
    if problems:
        return dict(template), problems
    patch = override.to_patch()
    merged: dict[str, Any] = strategic_merge(template, patch)
    spec = merged["spec"] = dict(merged["spec"])
    if spec.get("hostNetwork") is True:
        spec["dnsPolicy"] = HOST_NETWORK_DNS_POLICY
    container = spec["containers"][_trainer_index(spec)]
    problems = [
        *_mount_problems(spec, container, override),
        *_resource_problems(container, override),
        *_root_problems(spec, container, override),
    ]
    schema = _schema_problem(merged, patch, name, namespace)
    if schema is not None:
        problems.append(schema)
    return merged, problems
