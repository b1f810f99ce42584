"""The hardware and model catalog: GPU specifications and model presets, and their loader.

The data lives in `data/gpus.yaml` and `data/models.yaml` (every number with its unit in
its name and its source); this module holds the frozen, typed view of it (`GPUSpec`,
`ModelPreset`, `Catalog`) and the parser that turns the YAML text into it, failing loudly
with the path of any malformed field.

Pure except `load_catalog`, which reads the two packaged data files: callers load the
catalog once, at the edge, and pass the `Catalog` in. Nothing is read at import time and
the module keeps no mutable state.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Annotated, Any, Final, Literal, Self, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    StrictBool,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from trainplan.api.spec import SUPPORTED_MODELS
from trainplan.planner.calibration import Calibration, calibration_from_mapping
from trainplan.planner.shapes import Experts, LatentAttention, ModelShape

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
"""Every precision a catalog GPU may list a peak for, in the order they are shown."""

IntraNodeLink = Literal["nvlink", "infinity-fabric", "pcie"]
Vendor = Literal["nvidia", "amd"]

GPU_RESOURCES: Final[Mapping[str, str]] = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
"""The extended resource each vendor's device plugin advertises (NVIDIA's; AMD's
ROCm/k8s-device-plugin)."""
PRODUCT_LABELS: Final[Mapping[str, str]] = {
    "nvidia": "nvidia.com/gpu.product",
    "amd": "amd.com/gpu.product-name",
}
"""The node label naming a node's GPU model: NVIDIA GPU Feature Discovery's, AMD's node
labeller's (ROCm/k8s-device-plugin)."""

_D = TypeVar("_D", bound=BaseModel)


# --------------------------------------------------------------------------- errors


class CatalogDataError(ValueError):
    """A catalog data file (or text) is malformed; the message names the field path."""


class UnsupportedPrecisionError(ValueError):
    """A GPU has no peak for the requested precision (e.g. bf16 on a V100)."""

    def __init__(self, gpu: str, precision: str, available: tuple[str, ...]) -> None:
        self.gpu = gpu
        self.precision = precision
        self.available = available
        super().__init__(
            f"{gpu} does not support precision {precision!r}; "
            f"it has: {', '.join(available) or 'none'}"
        )

    def __reduce__(self) -> tuple[type[Self], tuple[str, str, tuple[str, ...]]]:
        return (type(self), (self.gpu, self.precision, self.available))


class _UnknownNameError(LookupError):
    """A name that is neither a catalog name nor an alias."""

    kind = "name"
    note = ""
    """A sentence after the known names (what kinds of things the catalog can hold)."""

    def __init__(self, name: str, suggestion: str | None, known: tuple[str, ...]) -> None:
        self.name = name
        self.suggestion = suggestion
        self.known = known
        hint = f"; did you mean {suggestion!r}?" if suggestion is not None else ";"
        note = f"; {self.note}" if self.note else ""
        super().__init__(f"unknown {self.kind} {name!r}{hint} known: {', '.join(known)}{note}")

    def __reduce__(self) -> tuple[type[Self], tuple[str, str | None, tuple[str, ...]]]:
        return (type(self), (self.name, self.suggestion, self.known))


class UnknownGPUError(_UnknownNameError):
    """`Catalog.gpu` was given a name that is no GPU's name, alias or GFD product label."""

    kind = "gpuType"


class UnknownModelError(_UnknownNameError):
    """`Catalog.model` was given a name that is no preset's name or alias."""

    kind = "model preset"
    note = SUPPORTED_MODELS


# --------------------------------------------------------------------------- records


def _normalize(name: str) -> str:
    """Lookup key: case-folded, trimmed, runs of spaces and underscores made one hyphen.

    So "NVIDIA A100-SXM4-80GB" (nvidia-smi), "NVIDIA-A100-SXM4-80GB" (the GFD label) and
    "a100_sxm4_80gb" all find the same GPU.
    """
    return re.sub(r"[\s_]+", "-", name.strip()).casefold()


class PeakFlopsTable(Mapping[str, float]):
    """Read-only, hashable mapping precision -> dense peak FLOP/s, in `PRECISIONS` order."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, float] | Iterable[tuple[str, float]]) -> None:
        pairs = dict(items.items() if isinstance(items, Mapping) else items)
        unknown = sorted(set(pairs) - set(PRECISIONS))
        if unknown:
            raise ValueError(f"unknown precisions {unknown}; expected some of {PRECISIONS}")
        self._items: tuple[tuple[str, float], ...] = tuple(
            (p, float(pairs[p])) for p in PRECISIONS if p in pairs
        )

    def __getitem__(self, key: str) -> float:
        for precision, flops in self._items:
            if precision == key:
                return flops
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (precision for precision, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"PeakFlopsTable({dict(self._items)!r})"

    def __reduce__(self) -> tuple[type[Self], tuple[tuple[tuple[str, float], ...]]]:
        return (type(self), (self._items,))


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU type: datasheet figures and the default cluster network around it.

    Bandwidths are bytes per second in one direction. `nvlink_bandwidth_bytes_per_second`
    is the GPU's bandwidth to the other GPUs of its node over `intra_node_link`: NVLink, or
    PCIe for PCIe cards. `network_bandwidth_bytes_per_second` is the inter-node bandwidth
    per GPU of a typical cluster of its generation (a cluster property, overridable).
    """

    name: str
    aliases: tuple[str, ...]
    gfd_product: str
    """Value of the vendor's product node label (`product_label`): NVIDIA GPU Feature
    Discovery's `nvidia.com/gpu.product`, or AMD's `amd.com/gpu.product-name`."""
    architecture: str
    year: int
    memory_bytes: int
    peak_flops: Mapping[str, float]
    """Precision -> dense (no sparsity) peak FLOP/s; see `PRECISIONS`."""
    hbm_bandwidth_bytes_per_second: float
    intra_node_link: IntraNodeLink
    nvlink_bandwidth_bytes_per_second: float
    network_bandwidth_bytes_per_second: float
    tdp_watts: float
    source: str
    nvlink_domain_gpus: int | None = None
    """GPUs one NVLink domain joins when it is not the node: 72 in a GB200 NVL72 rack of 18
    trays of 4 (groups inside it use NVLink across trays), 4 for H200 NVL cards' bridges
    (a node's bridge groups talk over PCIe); None: the node."""
    pcie_bandwidth_bytes_per_second: float | None = None
    """The card's PCIe bandwidth, one direction: the path between NVLink bridge groups of
    one node (`nvlink_domain_gpus` below the node)."""
    vendor: Vendor = "nvidia"
    """Whose device plugin places it: the pods' GPU resource and node label follow."""

    @property
    def resource_name(self) -> str:
        """The extended resource pods request it by (`nvidia.com/gpu`, `amd.com/gpu`)."""
        return GPU_RESOURCES[self.vendor]

    @property
    def product_label(self) -> str:
        """The node label whose value is `gfd_product`."""
        return PRODUCT_LABELS[self.vendor]

    @property
    def link_name(self) -> str:
        """The intra-node link in words: NVLink, Infinity Fabric or PCIe."""
        return {"nvlink": "NVLink", "infinity-fabric": "Infinity Fabric", "pcie": "PCIe"}[
            self.intra_node_link
        ]

    def __post_init__(self) -> None:
        if not isinstance(self.peak_flops, PeakFlopsTable):
            # Freeze whatever mapping was passed in, so the spec stays immutable and hashable.
            object.__setattr__(self, "peak_flops", PeakFlopsTable(self.peak_flops))

    @property
    def precisions(self) -> tuple[str, ...]:
        """The precisions this GPU has a peak for, in `PRECISIONS` order."""
        return tuple(self.peak_flops)

    def peak_flops_for(self, precision: str) -> float:
        """Dense peak FLOP/s at `precision`; `UnsupportedPrecisionError` if it has none."""
        try:
            return self.peak_flops[precision.strip().lower()]
        except KeyError:
            raise UnsupportedPrecisionError(self.name, precision, self.precisions) from None

    def with_node_network(self, gbps_per_node: float, gpus_per_node: int) -> GPUSpec:
        """This GPU in a cluster whose nodes have `gbps_per_node` gigabits per second of
        network, shared by their `gpus_per_node` GPUs (the catalog's figure is per GPU:
        one port each on its reference system)."""
        per_gpu = gbps_per_node * 1e9 / 8 / gpus_per_node
        return replace(self, network_bandwidth_bytes_per_second=per_gpu)

    def lookup_keys(self) -> tuple[str, ...]:
        """The normalized names this GPU answers to: name, aliases, GFD product label."""
        return tuple(_normalize(n) for n in (self.name, *self.aliases, self.gfd_product))


@dataclass(frozen=True, slots=True)
class ModelPreset:
    """A published model shape with its published parameter count and source."""

    name: str
    aliases: tuple[str, ...]
    parameters: float
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    ffn_hidden_size: int
    gated_mlp: bool
    vocab_size: int
    sequence_length: int
    tied_embeddings: bool
    source: str
    head_dim: int | None = None
    """A head width other than hidden / heads, as published."""
    experts: Experts | None = None
    latent_attention: LatentAttention | None = None
    active_parameters: float | None = None
    """Parameters one token passes through, as published (MoE models)."""
    dropout: bool = True
    """Pre-trained with dropout (`ModelShape.dropout`), as its source states."""

    @property
    def shape(self) -> ModelShape:
        """The shape alone, as the planner's formulas take it."""
        return ModelShape(
            layers=self.layers,
            hidden_size=self.hidden_size,
            attention_heads=self.attention_heads,
            kv_heads=self.kv_heads,
            ffn_hidden_size=self.ffn_hidden_size,
            gated_mlp=self.gated_mlp,
            vocab_size=self.vocab_size,
            sequence_length=self.sequence_length,
            tied_embeddings=self.tied_embeddings,
            declared_head_dim=self.head_dim,
            experts=self.experts,
            latent_attention=self.latent_attention,
            dropout=self.dropout,
        )

    def lookup_keys(self) -> tuple[str, ...]:
        """The normalized names this preset answers to: name and aliases."""
        return tuple(_normalize(n) for n in (self.name, *self.aliases))


def _check_unique(entries: Sequence[GPUSpec | ModelPreset], what: str) -> None:
    """`CatalogDataError` when two entries answer to the same normalized name or alias."""
    owners: dict[str, int] = {}
    for position, entry in enumerate(entries):
        for key in entry.lookup_keys():
            first = owners.setdefault(key, position)
            if first != position:
                raise CatalogDataError(
                    f"{what} name or alias {key!r} is used by both {entries[first].name!r} "
                    f"and {entry.name!r}"
                )


def _closest(name: str, entries: Sequence[GPUSpec | ModelPreset]) -> str | None:
    """The canonical name of the entry whose name or alias is closest to `name` (difflib)."""
    canonical = {key: entry.name for entry in entries for key in entry.lookup_keys()}
    matches = difflib.get_close_matches(_normalize(name), list(canonical), n=1, cutoff=0.6)
    return canonical[matches[0]] if matches else None


@dataclass(frozen=True, slots=True)
class Catalog:
    """All GPU types, model presets and the fitted efficiency constants.

    Lookups ignore case and accept aliases. `calibration` defaults to the packaged
    constants only through `load_catalog`; a catalog built in code passes its own.
    """

    gpus: tuple[GPUSpec, ...]
    models: tuple[ModelPreset, ...]
    calibration: Calibration

    def __post_init__(self) -> None:
        _check_unique(self.gpus, "GPU")
        _check_unique(self.models, "model")

    def gpu(self, name: str) -> GPUSpec:
        """The GPU called `name` (or an alias, or its GFD product label)."""
        key = _normalize(name)
        for spec in self.gpus:
            if key in spec.lookup_keys():
                return spec
        raise UnknownGPUError(name, _closest(name, self.gpus), self.gpu_names())

    def model(self, name: str) -> ModelPreset:
        """The model preset called `name` (or an alias)."""
        key = _normalize(name)
        for preset in self.models:
            if key in preset.lookup_keys():
                return preset
        raise UnknownModelError(name, _closest(name, self.models), self.model_names())

    def gpu_names(self) -> tuple[str, ...]:
        """Canonical GPU names, in catalog order."""
        return tuple(spec.name for spec in self.gpus)

    def model_names(self) -> tuple[str, ...]:
        """Canonical model preset names, in catalog order."""
        return tuple(preset.name for preset in self.models)


# --------------------------------------------------------------------------- file schema

_Name = Annotated[str, Field(min_length=1)]


class _Document(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, allow_inf_nan=False
    )


class _GPUDocument(_Document):
    name: _Name
    aliases: tuple[_Name, ...] = ()
    gfd_product: _Name
    architecture: _Name
    year: int = Field(ge=1990, le=2100)
    memory_bytes: PositiveInt
    peak_flops: dict[Literal["fp32", "tf32", "fp16", "bf16", "fp8"], PositiveFloat] = Field(
        min_length=1
    )
    hbm_bandwidth_bytes_per_second: PositiveFloat
    intra_node_link: IntraNodeLink
    vendor: Vendor = "nvidia"
    nvlink_bandwidth_bytes_per_second: PositiveFloat
    network_bandwidth_bytes_per_second: PositiveFloat
    tdp_watts: PositiveFloat
    source: _Name
    nvlink_domain_gpus: int | None = Field(None, ge=1, le=100_000, alias="nvlinkDomainGPUs")
    pcie_bandwidth_bytes_per_second: PositiveFloat | None = None


class _LatentAttentionDocument(_Document):
    kv_rank: PositiveInt
    query_rank: int = Field(0, ge=0)
    rope_head_dim: PositiveInt
    no_rope_head_dim: PositiveInt
    value_head_dim: PositiveInt


class _ModelDocument(_Document):
    name: _Name
    aliases: tuple[_Name, ...] = ()
    parameters: PositiveFloat
    active_parameters: PositiveFloat | None = None
    head_dim: PositiveInt | None = None
    experts: PositiveInt | None = None
    experts_per_token: PositiveInt | None = None
    expert_ffn_hidden_size: PositiveInt | None = None
    shared_experts: int = Field(0, ge=0)
    shared_expert_ffn_hidden_size: PositiveInt | None = None
    moe_layer_interval: PositiveInt = 1
    first_dense_layers: int = Field(0, ge=0)
    latent_attention: _LatentAttentionDocument | None = None
    layers: PositiveInt
    hidden_size: PositiveInt
    attention_heads: PositiveInt
    kv_heads: PositiveInt
    ffn_hidden_size: PositiveInt
    gated_mlp: StrictBool = Field(alias="gatedMLP")
    vocab_size: PositiveInt
    sequence_length: PositiveInt
    tied_embeddings: StrictBool
    dropout: StrictBool = True
    source: _Name

    @model_validator(mode="after")
    def _check_heads(self) -> Self:
        moe = (self.experts, self.experts_per_token, self.expert_ffn_hidden_size)
        if any(value is not None for value in moe) and None in moe:
            raise ValueError("experts, expertsPerToken and expertFfnHiddenSize go together")
        if self.head_dim is None and self.hidden_size % self.attention_heads:
            raise ValueError(
                f"hiddenSize ({self.hidden_size}) must be divisible by "
                f"attentionHeads ({self.attention_heads})"
            )
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attentionHeads ({self.attention_heads}) must be divisible by "
                f"kvHeads ({self.kv_heads})"
            )
        return self


class _GPUFile(_Document):
    gpus: tuple[_GPUDocument, ...]

    @model_validator(mode="after")
    def _check_not_empty(self) -> Self:
        if not self.gpus:
            raise ValueError("gpus must list at least one GPU")
        return self


class _ModelFile(_Document):
    models: tuple[_ModelDocument, ...]

    @model_validator(mode="after")
    def _check_not_empty(self) -> Self:
        if not self.models:
            raise ValueError("models must list at least one preset")
        return self


# --------------------------------------------------------------------------- parsing


def _format_location(loc: tuple[int | str, ...]) -> str:
    """('gpus', 2, 'peakFlops', 'fp64') -> 'gpus[2].peakFlops.fp64'."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith("["):  # pydantic's "[key]" marks a bad mapping key
            path += part
        else:
            path += f".{part}" if path else part
    return path or "(top level)"


def _entry_name(document: object, loc: tuple[int | str, ...]) -> str | None:
    """The `name` of the list entry an error points into, to say which entry is wrong."""
    if len(loc) >= 2 and isinstance(document, dict) and isinstance(loc[1], int):
        entries = document.get(loc[0])
        if isinstance(entries, list) and 0 <= loc[1] < len(entries):
            entry = entries[loc[1]]
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                return str(entry["name"])
    return None


def _validation_message(label: str, error: ValidationError, document: object) -> str:
    lines = [f"invalid {label}: {error.error_count()} error(s)"]
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        entry = _entry_name(document, loc)
        where = _format_location(loc) + (f" (entry {entry!r})" if entry else "")
        given = item.get("input")
        shown = "" if isinstance(given, dict | list) else f"; got {given!r}"
        lines.append(f"  {where}: {item['msg']}{shown}")
    return "\n".join(lines)


def _check_duplicate_keys(node: yaml.Node, label: str) -> None:
    """Reject a mapping that repeats a key (PyYAML would silently keep the last one)."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    mark = key.start_mark
                    raise CatalogDataError(
                        f"invalid {label}: duplicate key {key.value!r} at line "
                        f"{mark.line + 1}, column {mark.column + 1}"
                    )
                seen.add(key.value)
            _check_duplicate_keys(value, label)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicate_keys(item, label)


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it: the catalog is read by every
command that plans, and the pure-Python parser took most of the 0.17 s it cost."""


def _parse_yaml(text: str, label: str) -> Any:
    try:
        node = yaml.compose(text, Loader=_LOADER)
        if node is not None:
            _check_duplicate_keys(node, label)
        return yaml.load(text, Loader=_LOADER)  # a safe loader, either way
    except yaml.YAMLError as error:
        raise CatalogDataError(f"invalid {label}: not YAML: {error}") from error


def _validate(model: type[_D], text: str, label: str) -> _D:
    document = _parse_yaml(text, label)
    try:
        return model.model_validate(document)
    except ValidationError as error:
        raise CatalogDataError(_validation_message(label, error, document)) from None


def parse_gpus(gpus_yaml: str) -> tuple[GPUSpec, ...]:
    """The GPUs of a `gpus.yaml` text; `CatalogDataError` naming the bad field's path."""
    parsed = _validate(_GPUFile, gpus_yaml, "GPU catalog")
    return tuple(
        GPUSpec(
            name=g.name,
            aliases=g.aliases,
            gfd_product=g.gfd_product,
            architecture=g.architecture,
            year=g.year,
            memory_bytes=g.memory_bytes,
            peak_flops=PeakFlopsTable(g.peak_flops.items()),
            hbm_bandwidth_bytes_per_second=g.hbm_bandwidth_bytes_per_second,
            intra_node_link=g.intra_node_link,
            nvlink_bandwidth_bytes_per_second=g.nvlink_bandwidth_bytes_per_second,
            network_bandwidth_bytes_per_second=g.network_bandwidth_bytes_per_second,
            tdp_watts=g.tdp_watts,
            source=g.source,
            nvlink_domain_gpus=g.nvlink_domain_gpus,
            pcie_bandwidth_bytes_per_second=g.pcie_bandwidth_bytes_per_second,
            vendor=g.vendor,
        )
        for g in parsed.gpus
    )


def parse_models(models_yaml: str) -> tuple[ModelPreset, ...]:
    """The presets of a `models.yaml` text; `CatalogDataError` naming the bad field's path."""
    parsed = _validate(_ModelFile, models_yaml, "model catalog")
    return tuple(
        ModelPreset(
            name=m.name,
            aliases=m.aliases,
            parameters=m.parameters,
            layers=m.layers,
            hidden_size=m.hidden_size,
            attention_heads=m.attention_heads,
            kv_heads=m.kv_heads,
            ffn_hidden_size=m.ffn_hidden_size,
            gated_mlp=m.gated_mlp,
            vocab_size=m.vocab_size,
            sequence_length=m.sequence_length,
            tied_embeddings=m.tied_embeddings,
            source=m.source,
            head_dim=m.head_dim,
            experts=_experts(m),
            latent_attention=(
                None
                if m.latent_attention is None
                else LatentAttention(**m.latent_attention.model_dump())
            ),
            active_parameters=m.active_parameters,
            dropout=m.dropout,
        )
        for m in parsed.models
    )


def _experts(document: _ModelDocument) -> Experts | None:
    """The preset's mixture of experts, or None for a dense model."""
    if (
        document.experts is None
        or document.experts_per_token is None
        or document.expert_ffn_hidden_size is None
    ):
        return None
    try:
        return Experts(
            routed=document.experts,
            per_token=document.experts_per_token,
            ffn_hidden_size=document.expert_ffn_hidden_size,
            shared=document.shared_experts,
            shared_ffn_hidden_size=document.shared_expert_ffn_hidden_size,
            layer_interval=document.moe_layer_interval,
            first_dense_layers=document.first_dense_layers,
        )
    except ValueError as error:
        raise CatalogDataError(f"model catalog: {document.name}: {error}") from None


def parse_calibration(calibration_yaml: str) -> Calibration:
    """The constants of a `calibration.yaml` text; `CatalogDataError` on a bad field."""
    document = _parse_yaml(calibration_yaml, "calibration")
    try:
        return calibration_from_mapping(document)
    except (ValidationError, ValueError, TypeError) as error:
        raise CatalogDataError(f"invalid calibration: {error}") from None


def load_catalog_from(gpus_yaml: str, models_yaml: str, calibration_yaml: str) -> Catalog:
    """A catalog from the texts of a `gpus.yaml`, a `models.yaml` and a
    `calibration.yaml` (pure).

    For tests and user-supplied catalogs. Raises `CatalogDataError` (a `ValueError`) whose
    message gives the path of every malformed field, e.g. `gpus[2].peakFlops.fp64`, and
    the entry's name; or names a name/alias used twice.
    """
    return Catalog(
        gpus=parse_gpus(gpus_yaml),
        models=parse_models(models_yaml),
        calibration=parse_calibration(calibration_yaml),
    )


def load_catalog() -> Catalog:
    """The packaged catalog: `data/gpus.yaml`, `data/models.yaml` and
    `data/calibration.yaml` of this package.

    This is the one function of the catalog that reads files (through
    `importlib.resources`, so it works from a wheel or a zip). Callers load the catalog
    once, at the edge (CLI, controller start-up), and pass the `Catalog` to the pure code.
    """
    data = resources.files("trainplan.planner") / "data"
    return load_catalog_from(
        (data / "gpus.yaml").read_text(encoding="utf-8"),
        (data / "models.yaml").read_text(encoding="utf-8"),
        (data / "calibration.yaml").read_text(encoding="utf-8"),
    )
