"""Render each node's bootstrap (cloud-init user data) from the cluster spec. PLACEHOLDER until issue 3 lands.

Interface used by the island component and `ndfleet render`:
  render_bootstrap(spec, island) -> RenderedBootstrap(user_data, files); .custom_data is base64(gzip(user_data)).
"""

from __future__ import annotations

import base64
import gzip
from dataclasses import dataclass, field

from components.config import ClusterSpec, IslandSpec

# Azure's limit on customData, decoded (custom-data.md).
CUSTOM_DATA_MAX_BYTES = 65_535
HEALTH_PATH = "/health"


class BootstrapTooLarge(Exception):
    pass


@dataclass(frozen=True)
class RenderedBootstrap:
    user_data: str
    files: dict[str, str] = field(default_factory=dict)

    @property
    def custom_data_bytes(self) -> bytes:
        # mtime=0 keeps the output byte-identical between runs, so plans and diffs are deterministic.
        return gzip.compress(self.user_data.encode(), compresslevel=9, mtime=0)

    @property
    def custom_data(self) -> str:
        return base64.b64encode(self.custom_data_bytes).decode()


def render_bootstrap(spec: ClusterSpec, island: IslandSpec) -> RenderedBootstrap:
    user_data = f"#cloud-config\n# ndfleet {spec.stack} island {island.name}\npackage_update: false\n"
    return RenderedBootstrap(user_data=user_data, files={"user-data": user_data})
