"""Render each node's bootstrap (cloud-init user data) from the cluster spec.

Public API (ndfleet/prepare.py and `ndfleet render` call these; keep them stable):

  render_bootstrap(spec, island, extensions=None) -> RenderedBootstrap
      One island's user data; `.custom_data` is what the scale set receives (base64 of deterministic gzip),
      `.output_files()` what `ndfleet render` writes. Raises BootstrapTooLarge over Azure's limit.
  custom_data(spec, island, extensions=None) -> str
      Shorthand for render_bootstrap(...).custom_data: the scale set's customData for one island.
  render_output_files(spec, island, extensions=None) -> dict[name, (bytes, mode)]
      The files `ndfleet render` writes for one island (user-data, custom-data.b64, every file the user data
      carries), with their permissions.
  validation_budget_s(spec) -> int
      Worst-case set-up plus validation, from the same timeout table the node program's runner uses (the
      `timeouts` section of the node JSON) and each check's declared tool calls.

What a node receives: the node program as a zipapp (`/opt/ndfleet/bin/ndfleet-node`, the same bytes for every
stack: node/ndfleet_node, built by ndfleet/nodeapp.py), its per-stack figures in `/etc/ndfleet/node.json`
(ndfleet/nodeconfig.py), the `validate-node` wrapper, `/etc/ndfleet/nccl.conf` and the systemd units:

  ndfleet-setup.service      `ndfleet-node setup`: NVMe RAID0, /etc/nccl.conf, fabric manager, peermem, mounts
  ndfleet-validate.service   `validate-node --level quick|full` after set-up, at every boot
  ndfleet-validated.target   reached only when validation passed: job runners require it
  ndfleet-health.service     `ndfleet-node health`: the endpoint for Azure's Application Health extension

Other features add content without editing the templates, through `BootstrapExtensions` (every list empty by
default): `files` ({path, permissions, content} text files, or {path, permissions, content_bytes} binary ones),
`enable_units` / `start_units` (systemd units to enable at boot / start with --no-block after daemon-reload),
`runcmd` (extra cloud-init runcmd entries, run after the units are written and before validation starts), and
`node_sections` (extra top-level sections of the node JSON, e.g. `slurm`, `monitoring`). The templates under
templates/ only place values (StrictUndefined); every decision is made here.
"""

from __future__ import annotations

import base64
import functools
import gzip
import math
from dataclasses import dataclass, field
from typing import Any

import jinja2
from ndfleet_node.checks import PERF_IDS, QUICK_IDS, budget_s
from ndfleet_node.config import NodeConfig

from ndfleet import nodeapp
from ndfleet.burnin_node_config import IMPACT_UNIT_TIMEOUT_S
from ndfleet.nodeconfig import (  # re-exported: components and other modules import them from here
    BLOB_ENDPOINT_SUFFIX,
    BLOB_MOUNT_ROOT,
    CONFIG_DIR,
    FAILED_MARKER,
    HEALTH_PATH,
    IMDS_TAGS_URL,
    LUSTRE_MOUNT,
    NODE_CONFIG_PATH,
    NVME_MOUNT,
    REPORT_PATH,
    STATE_DIR,
    TAG_IDENTITY_CLIENT_ID,
    TAG_LUSTRE_MGS,
    TAG_STORAGE_ACCOUNT,
    node_config,
)
from ndfleet.nodeconfig import to_json as node_config_json
from ndfleet.spec.config import ClusterSpec, IslandSpec
from ndfleet.templating import TEMPLATES_DIR, environment

__all__ = [
    "BLOB_MOUNT_ROOT",
    "IMDS_TAGS_URL",
    "LUSTRE_MOUNT",
    "NVME_MOUNT",
    "TAG_IDENTITY_CLIENT_ID",
    "TAG_LUSTRE_MGS",
    "TAG_STORAGE_ACCOUNT",
    "BootstrapExtensions",
    "BootstrapTooLarge",
    "CUSTOM_DATA_MAX_BYTES",
    "HEALTH_PATH",
    "PERF_CHECKS",
    "QUICK_CHECKS",
    "RenderedBootstrap",
    "build_context",
    "custom_data",
    "render_bootstrap",
    "render_output_files",
    "validation_budget_s",
]

# Azure's limit on customData, decoded (custom-data.md; osProfile.customData: "The maximum length of the
# binary array is 65535 bytes").
CUSTOM_DATA_MAX_BYTES = 65_535

QUICK_CHECKS = QUICK_IDS
PERF_CHECKS = PERF_IDS

NODE_APP_PATH = "/opt/ndfleet/bin/ndfleet-node"
VALIDATE_NODE_PATH = "/usr/local/sbin/validate-node"
# Tools the Azure HPC images keep off the default PATH (nccl-tests, CUDA, DCGM, perftest, nvbandwidth).
NODE_TOOL_DIRS = (
    "/opt/nccl-tests/build",
    "/usr/local/cuda/bin",
    "/opt/nvbandwidth",
    "/opt/azurehpc/test/nvbandwidth",
)
NODE_PATH = ":".join((*NODE_TOOL_DIRS, "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"))
# The health endpoint's file-handle limit (systemd LimitNOFILE): well above its connection cap.
HEALTH_NOFILE = 8192
# Text files the user data carries: (template, name, path on the node, mode).
_NODE_FILES = (
    ("node/validate-node.j2", "validate-node", VALIDATE_NODE_PATH, "0755"),
    ("node/nccl.conf.j2", "nccl.conf", f"{CONFIG_DIR}/nccl.conf", "0644"),
    ("systemd/ndfleet-setup.service.j2", "ndfleet-setup.service", "/etc/systemd/system/ndfleet-setup.service", "0644"),
    ("systemd/ndfleet-validate.service.j2", "ndfleet-validate.service",
     "/etc/systemd/system/ndfleet-validate.service", "0644"),
    ("systemd/ndfleet-validated.target.j2", "ndfleet-validated.target",
     "/etc/systemd/system/ndfleet-validated.target", "0644"),
    ("systemd/ndfleet-health.service.j2", "ndfleet-health.service",
     "/etc/systemd/system/ndfleet-health.service", "0644"),
)  # fmt: skip
# Shell the bootstrap ships, for shellcheck (tests/test_bootstrap.py).
SHELL_FILES = ("validate-node",)


class BootstrapTooLarge(Exception):
    """The compressed user data is over Azure's customData limit."""


@dataclass(frozen=True)
class BootstrapExtensions:
    """What other features add to a node's bootstrap without editing the templates (all empty by default)."""

    files: list[dict[str, Any]] = field(default_factory=list)
    enable_units: list[str] = field(default_factory=list)
    start_units: list[str] = field(default_factory=list)
    runcmd: list[Any] = field(default_factory=list)
    node_sections: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RenderedBootstrap:
    user_data: str
    files: dict[str, str] = field(default_factory=dict)  # text files by name, "user-data" included
    binary_files: dict[str, bytes] = field(default_factory=dict)  # the zipapp
    node_paths: dict[str, str] = field(default_factory=dict)  # name -> path on the node (not user-data)
    modes: dict[str, str] = field(default_factory=dict)  # name -> permissions on the node

    @functools.cached_property
    def custom_data_bytes(self) -> bytes:
        # mtime=0 keeps the output byte-identical between runs, so plans and diffs are deterministic.
        return gzip.compress(self.user_data.encode(), compresslevel=9, mtime=0)

    @functools.cached_property
    def custom_data(self) -> str:
        return base64.b64encode(self.custom_data_bytes).decode()

    @property
    def headroom_bytes(self) -> int:
        return CUSTOM_DATA_MAX_BYTES - len(self.custom_data_bytes)

    def output_files(self) -> dict[str, tuple[bytes, int]]:
        """What `ndfleet render` writes: name -> (bytes, mode); executables 0755, the rest 0644."""
        out: dict[str, tuple[bytes, int]] = {}
        for name, text in self.files.items():
            out[name] = (text.encode(), int(self.modes.get(name, "0644"), 8) & 0o755)
        for name, data in self.binary_files.items():
            out[name] = (data, int(self.modes.get(name, "0755"), 8) & 0o755)
        out["custom-data.b64"] = ((self.custom_data + "\n").encode(), 0o644)
        return out


def _node_config_for(
    spec: ClusterSpec, island: IslandSpec, extensions: BootstrapExtensions | None = None, *, blob_endpoint_suffix: str
) -> str:
    sections = (extensions or BootstrapExtensions()).node_sections
    return node_config_json(node_config(spec, island, sections, blob_endpoint_suffix=blob_endpoint_suffix))


def _validate_budget_s(spec: ClusterSpec) -> int:
    cfg = NodeConfig(node_config(spec, spec.islands[0]))
    return math.ceil(budget_s(cfg, spec.health.validation_level))


def validation_budget_s(spec: ClusterSpec) -> int:
    """Longest a node's set-up plus validation can take, every tool call at its timeout (seconds).

    The scale set's Application Health grace period must be longer than this, so a node that is still
    validating is not judged; the validate unit's TimeoutStartSec uses the validation part.
    """
    return spec.profile.thresholds.setup_timeout_s + _validate_budget_s(spec)


def build_context(
    spec: ClusterSpec,
    island: IslandSpec,
    extensions: BootstrapExtensions | None = None,
    *,
    blob_endpoint_suffix: str = BLOB_ENDPOINT_SUFFIX,
) -> dict[str, Any]:
    """The plain template context: every value the templates place, derived here and nowhere else.

    `blob_endpoint_suffix` is the cloud's (ndfleet.clouds); the node reads it from its node JSON."""
    ext = extensions or BootstrapExtensions()
    cfg = node_config(spec, island, ext.node_sections, blob_endpoint_suffix=blob_endpoint_suffix)
    p = spec.profile
    nccl_conf = cfg["nccl"]["conf"]
    return {
        "stack": spec.stack,
        "island": island.name,
        "vm_size": p.name,
        "state_dir": STATE_DIR,
        "report_path": REPORT_PATH,
        "failed_marker": FAILED_MARKER,
        "config_path": NODE_CONFIG_PATH,
        "node_app": NODE_APP_PATH,
        "validate_node": VALIDATE_NODE_PATH,
        "node_path": NODE_PATH,
        "nccl_conf_lines": [f"{k}={v}" for k, v in nccl_conf.items()],
        "setup_timeout_s": p.thresholds.setup_timeout_s,
        "validation_level": spec.health.validation_level,
        "validate_timeout_s": _validate_budget_s(spec),
        "expected_mounts": cfg["mounts"]["expected"],
        "health_port": spec.health.probe_port,
        "health_path": HEALTH_PATH,
        "health_nofile": HEALTH_NOFILE,
        "impact_timeout_s": IMPACT_UNIT_TIMEOUT_S,
        # generic lists other features fill (BootstrapExtensions); empty by default
        "extra_files": [dict(f) for f in ext.files],
        "enable_units": list(ext.enable_units),
        "start_units": list(ext.start_units),
        "extra_runcmd": list(ext.runcmd),
    }


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return environment(TEMPLATES_DIR)


@functools.cache
def _template(name: str) -> jinja2.Template:
    return _environment().get_template(name)


def _write_file(path: str, mode: str, content: str | None = None, data: bytes | None = None) -> dict[str, str]:
    """One write_files entry: text as a literal block, bytes gzip-compressed (mtime 0) and base64-encoded."""
    if data is not None:
        packed = gzip.compress(data, compresslevel=9, mtime=0)
        return {"path": path, "mode": mode, "encoding": "gz+b64", "content": base64.b64encode(packed).decode()}
    return {"path": path, "mode": mode, "encoding": "", "content": content or ""}


def render_bootstrap(
    spec: ClusterSpec,
    island: IslandSpec,
    extensions: BootstrapExtensions | None = None,
    *,
    blob_endpoint_suffix: str = BLOB_ENDPOINT_SUFFIX,
) -> RenderedBootstrap:
    """The island's cloud-init user data and every file it carries; raises BootstrapTooLarge over the limit."""
    ext = extensions or BootstrapExtensions()
    ctx = build_context(spec, island, ext, blob_endpoint_suffix=blob_endpoint_suffix)
    files = {name: _template(tpl).render(ctx) for tpl, name, _, _ in _NODE_FILES}
    files["node.json"] = _node_config_for(spec, island, ext, blob_endpoint_suffix=blob_endpoint_suffix)
    app = nodeapp.build()
    paths = {name: path for _, name, path, _ in _NODE_FILES}
    modes = {name: mode for _, name, _, mode in _NODE_FILES}
    paths["node.json"], modes["node.json"] = NODE_CONFIG_PATH, "0644"
    paths["ndfleet-node"], modes["ndfleet-node"] = NODE_APP_PATH, "0755"
    write = [_write_file(NODE_APP_PATH, "0755", data=app), _write_file(NODE_CONFIG_PATH, "0644", files["node.json"])]
    write += [_write_file(paths[name], modes[name], files[name]) for _, name, _, _ in _NODE_FILES]
    for f in ext.files:
        raw = f.get("content_bytes")
        write.append(_write_file(f["path"], f.get("permissions", "0644"), f.get("content"), raw))
    user_data = _template("cloud-config.yaml.j2").render({**ctx, "files": write})
    rendered = RenderedBootstrap(
        user_data=user_data,
        files={"user-data": user_data, **files},
        binary_files={"ndfleet-node": app},
        node_paths=paths,
        modes=modes,
    )
    size = len(rendered.custom_data_bytes)
    if size > CUSTOM_DATA_MAX_BYTES:
        raise BootstrapTooLarge(
            f"stack {spec.stack!r} island {island.name!r}: the node bootstrap is {size:,} bytes gzip-compressed "
            f"({len(rendered.custom_data):,} base64), over Azure's customData limit of {CUSTOM_DATA_MAX_BYTES:,} "
            "bytes; shrink the node program or the templates, or move content to an image"
        )
    return rendered


def custom_data(spec: ClusterSpec, island: IslandSpec, extensions: BootstrapExtensions | None = None) -> str:
    """The island's customData (base64 of the gzip-compressed user data); raises BootstrapTooLarge."""
    return render_bootstrap(spec, island, extensions).custom_data


def render_output_files(
    spec: ClusterSpec, island: IslandSpec, extensions: BootstrapExtensions | None = None
) -> dict[str, tuple[bytes, int]]:
    """The files `ndfleet render` writes for one island: name -> (bytes, mode)."""
    return render_bootstrap(spec, island, extensions).output_files()
