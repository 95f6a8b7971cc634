"""Render each node's bootstrap (cloud-init user data) from the cluster spec.

Public API (ndfleet/prepare.py and `ndfleet render` call these; keep them stable):

  render_bootstrap(spec, island, extensions=None) -> RenderedBootstrap
      One island's boot data: `.custom_data` (base64 of deterministic gzip of the cloud-config) and `.vm_user_data`
      (base64 of the node bundle, ndfleet/nodefiles/nodebundle.py) are what the scale set receives,
      `.output_files()` what `ndfleet render` writes. Raises BootstrapTooLarge over either of Azure's limits.
      It is the two steps below in one.
  render_bundle(spec, island, extensions=None) -> NodeBundle
      The island-neutral node bundle of the island's shape (`bundle_shape`): rendered for the placeholder island
      and xz-compressed; every island of that shape shares it (ndfleet/nodefiles/nodebundle.py).
  island_bootstrap(spec, island, bundle) -> RenderedBootstrap
      One island's customData (naming the island, which the boot step fills into the bundle's files) beside it.
  render_output_files(spec, island, extensions=None) -> dict[name, (bytes, mode)]
      The files `ndfleet render` writes for one island (user-data, custom-data.b64, vm-user-data.b64, every file
      the node receives in either), with their permissions.
  validation_budget_s(spec) -> int
      Worst-case set-up plus validation, from the same timeout table the node program's runner uses (the
      `timeouts` section of the node JSON) and each check's declared tool calls.

Where it travels: customData (fixed for a node's life, 64 KB) carries only the boot step: `ndfleet-unpack`, its
manifest `/etc/ndfleet/bundle.json` (the bundle's size and sha256) and the units `ndfleet-bundle.service` and
`ndfleet-bundle-failed.service`. Everything below travels in the node bundle, the scale set's VM userData, which
the boot step fetches from the instance metadata service at first boot (docs/bootstrap.md, "Where the files travel").

What a node receives: the node program as a zipapp (`/opt/ndfleet/bin/ndfleet-node`, the same bytes for every
stack: node/ndfleet_node, built by ndfleet/nodefiles/nodeapp.py), its per-stack figures in `/etc/ndfleet/node.json`
(ndfleet/nodefiles/nodeconfig.py), the `validate-node` wrapper, `/etc/ndfleet/nccl.conf` and the systemd units:

  ndfleet-setup.service      `ndfleet-node setup`: NVMe RAID0, /etc/nccl.conf, fabric manager, peermem, mounts
  ndfleet-validate.service   `validate-node --level quick|full` after set-up, at every boot
  ndfleet-validated.target   reached only when validation passed: job runners require it
  ndfleet-health.service     `ndfleet-node health`: the endpoint for Azure's Application Health extension

Other features add content without editing the templates, through `BootstrapExtensions` (every list empty by
default): `files` (`MachineFile`s, ndfleet/nodefiles/machinefile.py: path, integer mode, bytes),
`enable_units` / `start_units` (systemd units to enable at boot / start with --no-block after daemon-reload),
`runcmd` (extra commands, argv lists or shell strings, run once the files are on disk and before validation
starts: the boot step runs them where cloud-init's runcmd ran them before), and
`node_sections` (extra top-level sections of the node JSON, e.g. `slurm`, `monitoring`). The templates under
templates/ only place values (StrictUndefined); every decision is made here.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jinja2
from ndfleet_node.names import NCCL_CONF_PATH, TAG_IDENTITY_CLIENT_ID, TAG_LUSTRE_MGS, TAG_STORAGE_ACCOUNT

from ndfleet import images
from ndfleet.boot_contract import CUSTOM_DATA_MAX_BYTES, USER_DATA_MAX_BYTES
from ndfleet.boot_version import boot_version, slurm_release
from ndfleet.images import COMPUTE_IMAGE
from ndfleet.nodefiles import nodeapp, nodebundle
from ndfleet.nodefiles.burnin_node_config import IMPACT_UNIT_TIMEOUT_S
from ndfleet.nodefiles.extensions import BootstrapExtensions, merge_extensions
from ndfleet.nodefiles.machinefile import MachineFile, render_name
from ndfleet.nodefiles.nodebundle import fill_island
from ndfleet.nodefiles.nodeconfig import (  # re-exported: other modules import them from here
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
    checks_budget_s,
    node_config,
)
from ndfleet.nodefiles.nodeconfig import to_json as node_config_json
from ndfleet.nodefiles.templating import TEMPLATES_DIR, environment
from ndfleet.stackconfig.clusterspec import ClusterSpec, IslandSpec

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
    "USER_DATA_MAX_BYTES",
    "HEALTH_PATH",
    "RenderedBootstrap",
    "NodeBundle",
    "boot_step",
    "build_context",
    "bundle_shape",
    "fill_island",
    "island_bootstrap",
    "merge_extensions",
    "neutral_island",
    "render_bootstrap",
    "render_bundle",
    "render_output_files",
    "validation_budget_s",
]


NODE_APP_PATH = "/opt/ndfleet/bin/ndfleet-node"
VALIDATE_NODE_PATH = "/usr/local/sbin/validate-node"
STANDARD_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# Folders of the tools the compute image keeps off the default PATH (nccl-tests; nvbandwidth where an image has it),
# from the image contracts (ndfleet/images, docs/images.md): the same for every contracted version, or the import
# fails naming them. HPC-X's own folders are not on it: the node program loads HPC-X (ndfleet_node.hpcx) for the
# tools that need it.
NODE_TOOL_DIRS = images.agreed(COMPUTE_IMAGE, lambda c: c.off_path_dirs(STANDARD_PATH))
NODE_PATH = ":".join((*NODE_TOOL_DIRS, *STANDARD_PATH))
# The health endpoint's file-handle limit (systemd LimitNOFILE): well above its connection cap.
HEALTH_NOFILE = 8192
# The impact report runs in a transient unit of its own, so that its starters (the validate unit's ExecStopPost; the
# Slurm health check, killed at 60 s) do not wait; while one is loaded, a second start files nothing; --collect
# unloads one that failed, which would refuse every later start until the next boot (systemd-run(1)). RuntimeMaxSec,
# not TimeoutStartSec: a transient service is Type=simple (systemd-run(1)), started at once (systemd.service(5)).
IMPACT_UNIT = "ndfleet-impact"


def impact_launch() -> str:
    """The one command line that starts the impact report from the validator's report (docs/burnin.md)."""
    return (f"systemd-run --no-block --collect --unit={IMPACT_UNIT} --property=RuntimeMaxSec={IMPACT_UNIT_TIMEOUT_S} "
            f"{NODE_APP_PATH} impact report --validator-report {REPORT_PATH} --config {NODE_CONFIG_PATH}")

# Text files the node bundle carries: (template, path on the node, mode); each is shown under its base name.
_NODE_FILES = (
    ("node/validate-node.j2", VALIDATE_NODE_PATH, 0o755),
    ("node/nccl.conf.j2", f"{CONFIG_DIR}/nccl.conf", 0o644),
    ("systemd/ndfleet-setup.service.j2", "/etc/systemd/system/ndfleet-setup.service", 0o644),
    ("systemd/ndfleet-validate.service.j2", "/etc/systemd/system/ndfleet-validate.service", 0o644),
    ("systemd/ndfleet-validated.target.j2", "/etc/systemd/system/ndfleet-validated.target", 0o644),
    ("systemd/ndfleet-health.service.j2", "/etc/systemd/system/ndfleet-health.service", 0o644),
)  # fmt: skip
# The boot step customData carries: the script itself (Python, shipped as it is), its manifest, then the units
# (template, path on the node, mode).
BUNDLE_UNIT = "ndfleet-bundle.service"
_BOOT_UNITS = (
    ("systemd/ndfleet-bundle.service.j2", f"/etc/systemd/system/{BUNDLE_UNIT}", 0o644),
    ("systemd/ndfleet-bundle-failed.service.j2", "/etc/systemd/system/ndfleet-bundle-failed.service", 0o644),
)  # fmt: skip
UNPACK_SOURCE = TEMPLATES_DIR / "node" / "ndfleet-unpack.py"
UNPACK_NAME = "ndfleet-unpack"
MANIFEST_NAME = "bundle.json"
# Shell the bootstrap ships, for shellcheck (tests/test_bootstrap.py).
SHELL_FILES = ("validate-node",)


class BootstrapTooLarge(Exception):
    """The compressed cloud-config is over Azure's customData limit, or the node bundle over its userData limit."""


@dataclass(frozen=True)
class RenderedBootstrap:
    user_data: str  # the cloud-config: what customData decodes to
    files: dict[str, str] = field(default_factory=dict)  # text files by name, "user-data" included
    binary_files: dict[str, bytes] = field(default_factory=dict)  # the zipapp
    node_paths: dict[str, str] = field(default_factory=dict)  # name -> path on the node (not user-data)
    modes: dict[str, str] = field(default_factory=dict)  # name -> permissions on the node
    # The node bundle (ndfleet/nodefiles/nodebundle.py): what VM userData decodes to; empty: no userData.
    bundle: bytes = b""
    custom_data_names: tuple[str, ...] = ()  # files the cloud-config carries; the others travel in the bundle
    activate: tuple[tuple[str, ...], ...] = ()  # the bundle's activation commands
    # The bundle in Key Vault parts (secret name -> value, nodebundle.parts) where it travels there, not in userData.
    bundle_parts: dict[str, str] = field(default_factory=dict)
    # The island's boot version (ndfleet/boot_version.py); "" for the Slurm machines, not rolled by island.
    boot_version: str = ""

    @property
    def vm_user_data(self) -> str:
        """The scale set's userData (base64 of the node bundle); empty when there is no bundle, or it travels in
        Key Vault parts."""
        return "" if self.bundle_parts else base64.b64encode(self.bundle).decode()

    @property
    def user_data_bytes(self) -> int:
        """What the scale set's userData decodes to."""
        return 0 if self.bundle_parts else len(self.bundle)

    @property
    def user_data_headroom_bytes(self) -> int:
        return USER_DATA_MAX_BYTES - self.user_data_bytes

    def node_files(self) -> dict[str, bytes]:
        """Every file the node receives, from customData and from the bundle alike: path on the node -> bytes."""
        contents = {**{n: t.encode() for n, t in self.files.items()}, **self.binary_files}
        return {path: contents[name] for name, path in self.node_paths.items()}

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
        if self.vm_user_data:
            out["vm-user-data.b64"] = ((self.vm_user_data + "\n").encode(), 0o644)
        for name, value in self.bundle_parts.items():
            out[f"{name}.b64"] = ((value + "\n").encode(), 0o644)
        return out


def setup_after(spec: ClusterSpec) -> list[str]:
    """The units ndfleet-setup.service starts after: the network, and the boot services of the stack's image that write
    the NCCL configuration the set-up writes (the image's contract; for azhpc-images, sku-customizations.service
    rewrites /etc/nccl.conf at every boot). Ordered after them, the set-up's file is the one left; a unit the image
    lacks orders nothing (systemd.unit(5), After=)."""
    contract, _ = spec.image.contract_of()
    return ["network-online.target", *contract.writers_of(NCCL_CONF_PATH)]


def _node_config_for(
    spec: ClusterSpec, island: IslandSpec, extensions: BootstrapExtensions | None = None, *, blob_endpoint_suffix: str
) -> str:
    sections = (extensions or BootstrapExtensions()).node_sections
    return node_config_json(node_config(spec, island, sections, blob_endpoint_suffix=blob_endpoint_suffix))


def validation_budget_s(spec: ClusterSpec) -> int:
    """Longest a node's set-up plus validation can take, every tool call at its timeout (seconds).

    The scale set's Application Health grace period must be longer than this, so a node that is still
    validating is not judged; the validate unit's TimeoutStartSec uses the validation part.
    """
    return spec.profile.thresholds.setup_timeout_s + checks_budget_s(spec)


def build_context(
    spec: ClusterSpec,
    island: IslandSpec,
    extensions: BootstrapExtensions | None = None,
    *,
    blob_endpoint_suffix: str = BLOB_ENDPOINT_SUFFIX,
) -> dict[str, Any]:
    """The plain template context: every value the templates place, derived here and nowhere else.

    `blob_endpoint_suffix` is the cloud's (ndfleet.stackconfig.clouds); the node reads it from its node JSON."""
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
        "setup_after": " ".join(setup_after(spec)),
        "nccl_conf_lines": [f"{k}={v}" for k, v in nccl_conf.items()],
        "setup_timeout_s": p.thresholds.setup_timeout_s,
        "validation_level": spec.health.validation_level,
        "validate_timeout_s": checks_budget_s(spec),
        "expected_mounts": cfg["mounts"]["expected"],
        "health_port": spec.health.probe_port,
        "health_path": HEALTH_PATH,
        "health_nofile": HEALTH_NOFILE,
        "impact_launch": impact_launch(),
        # generic lists other features fill (BootstrapExtensions); empty by default
        "extra_files": list(ext.files),
        "enable_units": list(ext.enable_units),
        "start_units": list(ext.start_units),
        "extra_runcmd": list(ext.runcmd),
        "bundle_unit": BUNDLE_UNIT,
    }


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return environment(TEMPLATES_DIR)


@functools.cache
def _template(name: str) -> jinja2.Template:
    return _environment().get_template(name)


def _argv(command: Any) -> list[str]:
    """A runcmd entry as cloud-init reads it: a list is an argv, a string a shell command."""
    if isinstance(command, str):
        return ["/bin/sh", "-c", command]
    return [str(a) for a in command]


def activation(ext: BootstrapExtensions) -> list[list[str]]:
    """What the boot step runs once the bundle's files are on disk (cloud-init's runcmd before the bundle): load
    the units, enable what starts at every boot, run the features' commands, then start the health endpoint and
    validation without waiting for them (a unit ordered after the boot step would wait for it otherwise)."""
    return [
        ["systemctl", "daemon-reload"],
        *(["systemctl", "enable", unit] for unit in ext.enable_units),
        *(_argv(command) for command in ext.runcmd),
        ["systemctl", "enable", "ndfleet-health.service"],
        ["systemctl", "start", "--no-block", "ndfleet-health.service"],
        ["systemctl", "enable", "ndfleet-validated.target"],
        *(["systemctl", "start", "--no-block", unit] for unit in ext.start_units),
        ["systemctl", "start", "--no-block", "ndfleet-validated.target"],
    ]


def neutral_island(island: IslandSpec) -> IslandSpec:
    """`island` under the placeholder name: what the node bundle is rendered for (nodebundle.ISLAND_PLACEHOLDER)."""
    return island.model_copy(update={"name": nodebundle.ISLAND_PLACEHOLDER})


def _too_large(spec: ClusterSpec, island: IslandSpec, what: str, size: int, encoded: int, limit: int) -> str:
    """what: "customData" (the cloud-config, gzip) or "userData" (the node bundle, xz)."""
    part, codec = ("bootstrap", "gzip") if what == "customData" else ("bundle", "xz")
    return (
        f"stack {spec.stack!r} island {island.name!r}: the node {part} is {size:,} bytes {codec}-compressed "
        f"({encoded:,} base64), over Azure's {what} limit of {limit:,} bytes; shrink the node program or the "
        "templates, or move content to an image"
    )


@dataclass(frozen=True)
class NodeBundle:
    """One island-neutral node bundle (nodebundle.ISLAND_PLACEHOLDER where the island's name goes): what every
    island of the same shape shares, rendered and xz-compressed once (`render_bundle`)."""

    ctx: dict[str, Any]  # the template context, for the placeholder island
    files: tuple[MachineFile, ...]  # as packed: island files still hold the placeholder
    commands: tuple[tuple[str, ...], ...]  # the activation commands
    bundle: bytes  # what userData decodes to, or the Key Vault parts hold
    vault: dict[str, str] | None = None  # BootstrapExtensions.bundle_vault: the bundle travels in Key Vault parts


def bundle_shape(island: IslandSpec) -> Any:
    """What of an island its bundle depends on, its name aside (the placeholder): whether and how it is elastic
    (Slurm's name program and resume timeout). Islands with the same shape share one `render_bundle`; a test
    renders islands of every size, index and elasticity alone and compares (tests/test_prepare_islands.py)."""
    return island.elastic


def render_bundle(
    spec: ClusterSpec,
    island: IslandSpec,
    extensions: BootstrapExtensions | None = None,
    *,
    blob_endpoint_suffix: str = BLOB_ENDPOINT_SUFFIX,
) -> NodeBundle:
    """The node bundle of `island`'s shape, rendered for the placeholder island (its name is not used).
    `extensions` as prepare.bootstrap_extensions gives them: rendered for the placeholder island too."""
    ext = extensions or BootstrapExtensions()
    neutral = neutral_island(island)
    ctx = build_context(spec, neutral, ext, blob_endpoint_suffix=blob_endpoint_suffix)
    node = [
        *(MachineFile.text(path, mode, _template(tpl).render(ctx)) for tpl, path, mode in _NODE_FILES),
        MachineFile.text(
            NODE_CONFIG_PATH, 0o644, _node_config_for(spec, neutral, ext, blob_endpoint_suffix=blob_endpoint_suffix)
        ),
        MachineFile(NODE_APP_PATH, 0o755, nodeapp.build()),
    ]
    reserved = ("user-data", UNPACK_NAME, MANIFEST_NAME, *(render_name(p) for _, p, _ in _BOOT_UNITS))
    names = {f.name: f.path for f in node}
    for f in ext.files:
        if f.name in names or f.name in reserved:
            taken = names.get(f.name, f.name)
            raise ValueError(f"bootstrap file {f.path!r}: its name {f.name!r} is taken by {taken!r}")
        names[f.name] = f.path
    node += ext.files
    commands = activation(ext)
    return NodeBundle(
        ctx=ctx,
        files=tuple(node),
        commands=tuple(tuple(c) for c in commands),
        bundle=nodebundle.pack(node, commands),
        vault=ext.bundle_vault,
    )


@functools.cache
def _unpack_source() -> str:
    return UNPACK_SOURCE.read_text(encoding="utf-8")


def boot_step(manifest: dict[str, Any], commands: Sequence[Sequence[str]]) -> list[MachineFile]:
    """The boot step in customData (compute nodes and the Slurm controller): `ndfleet-unpack`, its `manifest`
    (nodebundle.manifest), ndfleet-bundle.service (time limit from the activation `commands`) and, where the manifest
    names a health port (a probe watches the machine), the unit answering it Unhealthy when unpacking failed."""
    port = manifest.get("health_port")
    units = _BOOT_UNITS if port is not None else _BOOT_UNITS[:1]
    timeout_s = nodebundle.unit_timeout_s(commands, from_vault="vault" in manifest)
    ctx = {"unpack_path": nodebundle.UNPACK_PATH, "manifest_path": nodebundle.MANIFEST_PATH, "health_port": port,
           "bundle_timeout_s": timeout_s,
           "on_failure": render_name(_BOOT_UNITS[1][1]) if port is not None else ""}  # fmt: skip
    return [
        MachineFile.text(nodebundle.UNPACK_PATH, 0o755, _unpack_source(), UNPACK_NAME),
        MachineFile.text(nodebundle.MANIFEST_PATH, 0o644, json.dumps(manifest, indent=1, sort_keys=True) + "\n"),
        *(MachineFile.text(path, mode, _template(tpl).render(ctx)) for tpl, path, mode in units),
    ]


def island_bootstrap(
    spec: ClusterSpec, island: IslandSpec, bundle: NodeBundle, first_slot: int = 0
) -> RenderedBootstrap:
    """The island's customData (the boot step, naming the island) beside the shared `bundle` (userData, or the
    vault's slots from `first_slot`: prepare lays a stack's distinct bundles into consecutive slots), and every
    file a node of the island writes; raises BootstrapTooLarge over either limit. The island's boot version is a
    hash over this customData, which carries it: rendered with BOOT_VERSION_PLACEHOLDER, hashed, rendered again
    with the version in its place, and nothing else differs (ndfleet/boot_version.py)."""

    def cloud_config(version: str) -> tuple[list[MachineFile], str]:
        manifest = nodebundle.manifest(bundle.bundle, spec.health.probe_port, island.name, vault=bundle.vault,
                                       first_slot=first_slot, boot_version=version)  # fmt: skip
        boot = boot_step(manifest, bundle.commands)
        boot_ctx = {**bundle.ctx, "island": island.name, "bundle_unit": BUNDLE_UNIT}
        return boot, _template("cloud-config.yaml.j2").render({**boot_ctx, "files": boot})

    _, unversioned = cloud_config(nodebundle.BOOT_VERSION_PLACEHOLDER)
    version = boot_version(spec.image.urn, unversioned, bundle.bundle, slurm_release(spec))
    boot, user_data = cloud_config(version)
    node = fill_island(bundle.files, island.name, version)  # what this island's nodes write: what `render` shows
    for placeholder in (nodebundle.ISLAND_PLACEHOLDER, nodebundle.BOOT_VERSION_PLACEHOLDER):
        if placeholder in user_data:
            raise AssertionError(f"customData holds the placeholder {placeholder}: only the bundle's files may")
    files = {"user-data": user_data}
    binary_files: dict[str, bytes] = {}
    for f in (*boot, *node):
        try:
            files[f.name] = f.content
        except UnicodeDecodeError:  # the zipapp
            binary_files[f.name] = f.data
    rendered = RenderedBootstrap(
        user_data=user_data,
        files=files,
        binary_files=binary_files,
        node_paths={f.name: f.path for f in (*boot, *node)},
        modes={f.name: f.octal for f in (*boot, *node)},
        bundle=bundle.bundle,
        custom_data_names=tuple(f.name for f in boot),
        activate=bundle.commands,
        bundle_parts=nodebundle.parts(bundle.bundle, first_slot) if bundle.vault else {},
        boot_version=version,
    )
    problems = []
    size = len(rendered.custom_data_bytes)
    if size > CUSTOM_DATA_MAX_BYTES:
        problems.append(_too_large(spec, island, "customData", size, len(rendered.custom_data), CUSTOM_DATA_MAX_BYTES))
    if rendered.user_data_bytes > USER_DATA_MAX_BYTES:
        problems.append(
            _too_large(spec, island, "userData", len(bundle.bundle), len(rendered.vm_user_data), USER_DATA_MAX_BYTES)
        )
    if problems:
        raise BootstrapTooLarge("; ".join(problems))
    return rendered


def render_bootstrap(
    spec: ClusterSpec,
    island: IslandSpec,
    extensions: BootstrapExtensions | None = None,
    *,
    blob_endpoint_suffix: str = BLOB_ENDPOINT_SUFFIX,
) -> RenderedBootstrap:
    """The island's customData (the boot step), its node bundle (userData) and every file they carry; raises
    BootstrapTooLarge over either limit. The bundle is rendered for the placeholder island and filled in on the
    node (nodebundle: island-neutral); prepare shares one `render_bundle` between islands of the same shape."""
    bundle = render_bundle(spec, island, extensions, blob_endpoint_suffix=blob_endpoint_suffix)
    return island_bootstrap(spec, island, bundle)


def render_output_files(
    spec: ClusterSpec, island: IslandSpec, extensions: BootstrapExtensions | None = None
) -> dict[str, tuple[bytes, int]]:
    """The files `ndfleet render` writes for one island: name -> (bytes, mode)."""
    return render_bootstrap(spec, island, extensions).output_files()
