"""The node's per-stack figures: one JSON file, /etc/ndfleet/node.json, rendered by `ndfleet` from the VM-size
profile and the stack (ndfleet/nodefiles/nodeconfig.py). The program is the same for every stack; only this file
differs.

`load(path)` returns a `NodeConfig`. Sections this program knows are read through its properties; every other
top-level section (added by other features: `slurm`, `monitoring`, `impact`, `burnin`, ...) stays available as
a plain dict through `section(name)`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

DEFAULT_PATH = "/etc/ndfleet/node.json"
ENV_PATH = "NDFLEET_NODE_CONFIG"
SCHEMA = 1
REQUIRED = ("stack", "island", "vm_size", "paths", "validation", "timeouts", "hardware", "thresholds", "mounts")
DEFAULT_BLOB_SUFFIX = "blob.core.windows.net"


class ConfigError(Exception):
    """The node JSON is missing or not what this program reads; the message names the file and the problem."""


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
    def vm_size(self) -> str:
        return str(self.data["vm_size"])

    @property
    def paths(self) -> dict[str, Any]:
        return self.section("paths")

    @property
    def hardware(self) -> dict[str, Any]:
        return self.section("hardware")

    @property
    def thresholds(self) -> dict[str, Any]:
        return self.section("thresholds")

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
    return NodeConfig(data, path)


def load(path: str | None = None) -> NodeConfig:
    path = resolve_path(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the node configuration {path}: {e}") from None
    return parse(text, path)
