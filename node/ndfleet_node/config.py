"""The node's per-stack figures: one JSON file, /etc/ndfleet/node.json, rendered by `ndfleet` from the VM-size
profile and the stack (ndfleet/nodefiles/nodeconfig.py). The program is the same for every stack; only this file
differs.

`load(path)` returns a `NodeConfig`. Sections this program knows are read through its properties; `hardware` and
`thresholds` are typed (`Hardware`, `Thresholds`: the tool fills the same classes, so each key has one spelling
on both sides and a missing or unknown key is a ConfigError here, not a KeyError in a check); every other
top-level section (added by other features: `slurm`, `monitoring`, `impact`, `burnin`, ...) stays available as
a plain dict through `section(name)`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

DEFAULT_PATH = "/etc/ndfleet/node.json"
ENV_PATH = "NDFLEET_NODE_CONFIG"
SCHEMA = 1
REQUIRED = ("stack", "island", "vm_size", "paths", "validation", "timeouts", "hardware", "thresholds", "mounts")
DEFAULT_BLOB_SUFFIX = "blob.core.windows.net"


class ConfigError(Exception):
    """The node JSON is missing or not what this program reads; the message names the file and the problem."""


@dataclass(frozen=True)
class Hardware:
    """What the VM size promises (the tool fills it from the size's profile, ndfleet/stackconfig/profiles.py)."""

    gpu_count: int
    gpu_model: str
    nvlinks_per_gpu: int
    gpu_pcie_gen: int
    gpu_pcie_width: int
    ib_devices: list[str]
    ib_port: int
    ib_rate_gbps: int
    ib_link_layer: str
    hca_pcie_gen: int
    hca_pcie_width: int
    nvme_count: int
    memory_min_gib: int
    vcpus: int


@dataclass(frozen=True)
class Thresholds:
    """A healthy node's limits and floors: the profile's HealthThresholds of the same names, and the loopback port."""

    ecc_sram_uncorrectable_max: int
    ecc_sram_correctable_max: int
    ecc_dram_uncorrectable_max: int
    ecc_dram_correctable_max: int
    xid_fail_codes: list[int]
    ib_link_down_max: int
    ib_flap_window_hours: int
    nccl_busbw_gbps: float
    nccl_bytes: int
    ib_write_bw_gbps: float
    ib_write_bw_bytes: int
    ib_write_bw_base_port: int
    nvbw_host_device_gbps: float
    nvbw_device_device_gbps: float


def typed(cls: Any, data: Any, name: str, path: str) -> Any:
    """`cls` from a JSON object whose keys are exactly its fields (a missing or unknown one: ConfigError)."""
    try:
        return cls(**data)
    except TypeError as e:
        raise ConfigError(f"{path}: section {name}: {e}") from None


@dataclass(frozen=True)
class NodeConfig:
    data: dict[str, Any]
    path: str = DEFAULT_PATH

    def section(self, name: str) -> dict[str, Any]:
        """A top-level section as a dict ({} when absent): for sections other features add."""
        value = self.data.get(name)
        return value if isinstance(value, dict) else {}

    @property
    def stack(self) -> str:
        return str(self.data["stack"])

    @property
    def island(self) -> str:
        return str(self.data["island"])

    @property
    def boot_version(self) -> str:
        """The island's boot version the boot step wrote in (ndfleet/boot_version.py); "" when the node JSON has
        none or not one of 12 hex digits (a node of an ndfleet before boot versions, or a stray placeholder)."""
        value = self.data.get("boot_version")
        if isinstance(value, str) and len(value) == 12 and all(c in "0123456789abcdef" for c in value):
            return value
        return ""

    @property
    def vm_size(self) -> str:
        return str(self.data["vm_size"])

    @property
    def paths(self) -> dict[str, Any]:
        return self.section("paths")

    @cached_property
    def hardware(self) -> Hardware:
        h: Hardware = typed(Hardware, self.data.get("hardware"), "hardware", self.path)
        return h

    @cached_property
    def thresholds(self) -> Thresholds:
        t: Thresholds = typed(Thresholds, self.data.get("thresholds"), "thresholds", self.path)
        return t

    @property
    def timeouts(self) -> dict[str, float]:
        return self.section("timeouts")

    @property
    def mounts(self) -> dict[str, Any]:
        return self.section("mounts")

    @property
    def validation(self) -> dict[str, Any]:
        return self.section("validation")

    @property
    def blob_endpoint_suffix(self) -> str:
        return str(self.mounts.get("blob_endpoint_suffix") or DEFAULT_BLOB_SUFFIX)

    def levels(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.validation.get("levels", {}).items()}


def resolve_path(path: str | None) -> str:
    return path or os.environ.get(ENV_PATH) or DEFAULT_PATH


def parse(text: str, path: str = DEFAULT_PATH) -> NodeConfig:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ConfigError(f"{path}: missing section(s) {', '.join(missing)}")
    if data.get("schema") != SCHEMA:
        raise ConfigError(f"{path}: schema {data.get('schema')!r}, this program reads schema {SCHEMA}")
    config = NodeConfig(data, path)
    config.hardware, config.thresholds  # noqa: B018 (checked now: a bad section cannot run anything)
    return config


def load(path: str | None = None) -> NodeConfig:
    path = resolve_path(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the node configuration {path}: {e}") from None
    return parse(text, path)
