"""The node bundle: what a compute node receives in its scale set's VM userData rather than in customData.

customData is fixed for a node's life and limited to 64 KB; it carries only the boot step (docs/bootstrap.md,
"Where the files travel"). Everything else a node receives (the node program, its figures, the units, the Slurm and
monitoring files) travels as one bundle in `virtualMachineProfile.userData`, which the node reads from the instance
metadata service at first boot:

  userData = base64( xz( JSON {"format": 2, "files": [{"path", "mode", "data"}, ...], "activate": [[argv], ...],
                              "island": {"placeholder": ISLAND_PLACEHOLDER, "paths": [path, ...]}} ) )

`data` is the file's bytes, each byte written as the character of the same number (latin-1), so text and the zipapp
travel alike and the JSON stays ASCII; `activate` are the commands the boot step runs once the files are on disk
(what cloud-init's runcmd ran before). xz compresses the prod bundle to 43.2 KB where gzip gives 50.9 KB; Python's
`lzma` module is part of the standard library of the Ubuntu and Debian python3 packages.

customData carries the bundle's size and sha256 (`manifest`), so a node refuses a userData that is not the one
rendered with its customData (a userData from another deployment).

On a stack that runs Slurm the bundle travels in the Slurm vault instead (`parts`, `manifest(vault=...)`): its
base64 cut into Key Vault secrets the deployment writes, which the boot step reads with the node's identity
(docs/bootstrap.md, "When the bundle outgrows userData"); the same size and sha256 decide.

The bundle is island-neutral: every island's files are rendered with ISLAND_PLACEHOLDER where the island's name goes
(node.json's "island", slurmd's `Feature=island-<name>`, the metrics label, a comment), and `island.paths` lists the
files that hold it. customData, which is per scale set anyway, carries the name (the manifest's "island"), and the
boot step writes those files with the placeholder replaced by it. So every island of a stack with the same shape
gets the same userData, xz-compressed once (`pack` caches by content): xz at preset 9e is most of a many-island
plan otherwise (issue 30, docs/bootstrap.md "One bundle for every island"). The node-side step is
templates/node/ndfleet-unpack.py; `unpack` here is its reference reading, for tests and tools.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import lzma
from collections.abc import Iterable, Sequence
from typing import Any

from ndfleet.boot_contract import USER_DATA_MAX_BYTES, USER_DATA_MAX_CHARS

# Where the island's boot version goes: replaced by the manifest's "boot_version" in the files the bundle's
# "boot_version" part names, as the island's name is (ndfleet/boot_version.py).
from ndfleet.boot_version import BOOT_VERSION_PLACEHOLDER
from ndfleet.nodefiles.machinefile import MachineFile
from ndfleet.nodefiles.nodeconfig import CONFIG_DIR, FAILED_MARKER, HEALTH_PATH, IMDS_TAGS_URL

FORMAT = 2
# Where an island's name goes in the bundle's files: the boot step replaces it with the manifest's "island". Only
# letters, digits and hyphens, like an island name (nothing a template quotes or escapes changes it), and no real
# file holds it: `pack` refuses a bundle whose zipapp or other binary file would.
ISLAND_PLACEHOLDER = "ndfleet-island-name-placeholder-4f1c"
# IMDS serves the VM's userData (the base64 text as given to Azure) at this address (Microsoft Learn, "User data for
# Azure Virtual Machine": api-version 2021-01-01, format=text; the Metadata: true header is required).
IMDS_USER_DATA_URL = "http://169.254.169.254/metadata/instance/compute/userData?api-version=2021-01-01&format=text"
UNPACK_PATH = "/usr/local/sbin/ndfleet-unpack"
MANIFEST_PATH = f"{CONFIG_DIR}/bundle.json"
# Persistent (the OS disk): the sha256 of the bundle last unpacked and activated here. A reboot finds it and does
# nothing; a reimage (a fresh OS disk) does not, and unpacks again.
STAMP_PATH = "/var/lib/ndfleet/bundle.sha256"
# Fetching: attempts, each bounded by a timeout, with doubling pauses (1, 2, 4, ... s) up to the cap between them.
FETCH_ATTEMPTS = 8
FETCH_TIMEOUT_S = 10
FETCH_BACKOFF_MAX_S = 20
# Each activation command (systemctl daemon-reload, enable, start --no-block) is bounded by this.
COMMAND_TIMEOUT_S = 60
# Where the Slurm stacks' compute bundle travels instead (docs/bootstrap.md, "When the bundle outgrows userData"): Key
# Vault secrets the deployer writes through Resource Manager, read by the node with its managed identity. A secret
# holds at most 25 KB (Microsoft Learn, "About Azure Key Vault secrets"); the bundle's base64 is cut into parts of at
# most this many characters (bytes). The parts go into a fixed set of slot secrets kept for the vault's whole life
# (docs/bootstrap.md, "Slots, not one secret per bundle"): a new bundle is a new version of a slot (an in-place
# update), never a new secret, so any sequence of deployments (a revert included) creates nothing that exists.
PART_CHARS = 24_000
PART_PREFIX = "ndfleet-bundle-"
# How many slots every Slurm vault holds: the distinct bundles of a stack (one per island shape) take consecutive
# slots; a stack needing more is refused at plan time (slot_problem). 16 x 24,000 characters: about 280 KB of xz
# (the twin stack's three shapes take 11).
SLOT_COUNT = 16
SLOT_NAMES = tuple(f"{PART_PREFIX}{n}" for n in range(SLOT_COUNT))
# What an unused slot holds (a short word, so the plan shows it is no part).
SLOT_PLACEHOLDER = "unused"
# A slot whose current value is not the part this VM's customData names (a later deployment wrote a newer bundle, a
# reimage of a VM on an earlier model) is looked up in its versions: at most this many pages of "Get Secret
# Versions" (maxresults each) and this many versions read, newest first.
VERSIONS_PAGE_SIZE = 25
VERSIONS_MAX_PAGES = 8
VERSIONS_MAX_READ = 40
# Role assignments take minutes to reach Key Vault: 401/403/404 (and 429, 5xx, no answer) are retried this long,
# pausing this long between tries; the Slurm set-up waits for the munge key the same (ndfleet.slurm.machines).
VAULT_WAIT_S = 600
VAULT_RETRY_S = 15
# A secret's JSON answer (25 KB of value and its attributes) is read up to this much.
MAX_SECRET_ANSWER_BYTES = 64 << 10
KEYVAULT_API_VERSION = "7.4"
# Key Vault's Get Secret (Microsoft Learn, Key Vault REST API "Get Secret"): the boot step fills in the vault's name
# (from the scale set's tag, checked as a vault name) and the part's.
SECRET_URL = "https://{vault}.vault.azure.net/secrets/{name}?api-version=" + KEYVAULT_API_VERSION
# Key Vault's Get Secret Versions (Microsoft Learn, Key Vault REST API 7.4 "Get Secret Versions"): items carry each
# version's `id` (https://{vault}.vault.azure.net/secrets/{name}/{version}) without its value, and `nextLink`.
VERSIONS_URL = (
    "https://{vault}.vault.azure.net/secrets/{name}/versions?api-version="
    + KEYVAULT_API_VERSION
    + f"&maxresults={VERSIONS_PAGE_SIZE}"
)
IMDS_VAULT_TOKEN_URL = (
    "http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fvault.azure.net"
)
# The decompressed bundle is about 200 KB; anything past this is refused before it is parsed.
MAX_UNPACKED_BYTES = 4 << 20
XZ_FILTERS: list[dict[str, Any]] = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 1 << 20}]


class BundleError(ValueError):
    """A userData value that is not a node bundle this renderer could have written."""


def fetch_budget_s(attempts: int = FETCH_ATTEMPTS) -> int:
    """Longest the boot step can spend fetching: every attempt at its timeout plus every pause between them."""
    pauses = sum(min(2**i, FETCH_BACKOFF_MAX_S) for i in range(attempts - 1))
    return attempts * FETCH_TIMEOUT_S + pauses


def unit_timeout_s(activate: Sequence[Sequence[str]], *, from_vault: bool = False) -> int:
    """The boot step unit's TimeoutStartSec: fetching (the tags and token from IMDS, then, from the vault, the wait
    for the role assignment with one more try at its bound) plus every activation command at its timeout."""
    vault = VAULT_WAIT_S + VAULT_RETRY_S + FETCH_TIMEOUT_S if from_vault else 0
    return fetch_budget_s() + vault + COMMAND_TIMEOUT_S * max(1, len(activate))


def part_texts(bundle: bytes) -> list[str]:
    """The bundle's base64 in order, PART_CHARS characters each (the last may be shorter)."""
    text = base64.b64encode(bundle).decode()
    return [text[n : n + PART_CHARS] for n in range(0, len(text), PART_CHARS)]


def slot_count(bundle: bytes) -> int:
    """How many slots `bundle` takes."""
    return -(-len(base64.b64encode(bundle)) // PART_CHARS)


def part_names(bundle: bytes, first_slot: int = 0) -> list[str]:
    """The slot secrets that hold `bundle` when it starts at `first_slot`; a secret name is 1-127 letters, digits
    and dashes (Microsoft Learn, "Naming rules for Azure resources", Microsoft.KeyVault)."""
    return list(SLOT_NAMES[first_slot : first_slot + slot_count(bundle)])


def parts(bundle: bytes, first_slot: int = 0) -> dict[str, str]:
    """Slot name -> value: the bundle's parts laid into consecutive slots from `first_slot`."""
    return dict(zip(part_names(bundle, first_slot), part_texts(bundle), strict=True))


def slot_values(bundle_parts: dict[str, str]) -> dict[str, str]:
    """Every slot's value for a stack whose bundles hold `bundle_parts`: the unused ones SLOT_PLACEHOLDER."""
    return {name: bundle_parts.get(name, SLOT_PLACEHOLDER) for name in SLOT_NAMES}


def first_slots(bundles: Sequence[bytes]) -> tuple[dict[bytes, int], int]:
    """The distinct `bundles` in order of first appearance -> their first slot, and how many slots they take."""
    start: dict[bytes, int] = {}
    used = 0
    for bundle in bundles:
        if bundle not in start:
            start[bundle] = used
            used += slot_count(bundle)
    return start, used


def island_paths(files: Iterable[MachineFile], placeholder: str = ISLAND_PLACEHOLDER) -> list[str]:
    """The files that hold `placeholder` (the island's, or BOOT_VERSION_PLACEHOLDER), in order; ValueError when one
    of them is not UTF-8 text (a zipapp that happened to hold it would be corrupted by the replacement)."""
    token = placeholder.encode()
    paths = []
    for f in files:
        if token in f.data:
            try:
                f.data.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"bundle file {f.path!r} is binary and holds the placeholder {placeholder}") from None
            paths.append(f.path)
    return paths


def fill_island(files: Sequence[MachineFile], island: str, version: str | None = None) -> list[MachineFile]:
    """The bundle's files as a node of `island` writes them: the placeholders replaced (the island's name and, when
    given, its boot version), as the boot step does."""
    fills = [(ISLAND_PLACEHOLDER, island), (BOOT_VERSION_PLACEHOLDER, version)]
    for token, value in fills:
        if value is not None:
            files = [dataclasses.replace(f, data=f.data.replace(token.encode(), value.encode())) for f in files]
    return list(files)


def pack(files: Iterable[MachineFile], activate: Sequence[Sequence[str]]) -> bytes:
    """The bundle's bytes (what userData decodes to): deterministic, so plans and diffs are."""
    files = list(files)
    doc = {
        "format": FORMAT,
        "files": [{"path": f.path, "mode": f.octal, "data": f.data.decode("latin-1")} for f in files],
        "activate": [list(argv) for argv in activate],
        "island": {"placeholder": ISLAND_PLACEHOLDER, "paths": island_paths(files)},
        "boot_version": {"placeholder": BOOT_VERSION_PLACEHOLDER,
                         "paths": island_paths(files, BOOT_VERSION_PLACEHOLDER)},
    }
    return _compress(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("ascii"))


@functools.lru_cache(maxsize=8)
def _compress(text: bytes) -> bytes:
    """xz at preset 9e: about 0.1 s a bundle. Islands of the same shape pack the same text, so each distinct bundle
    is compressed once per process (the key is the whole text; a few bundles of about 200 KB are kept)."""
    return lzma.compress(text, format=lzma.FORMAT_XZ, filters=XZ_FILTERS)


def manifest(
    bundle: bytes, health_port: int | None, island: str | None, *, more_follows: bool = False,
    vault: dict[str, str] | None = None, first_slot: int = 0, boot_version: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """What customData tells the boot step (/etc/ndfleet/bundle.json): which bundle to accept, where, and the island
    whose name replaces ISLAND_PLACEHOLDER in the bundle's files.

    The Slurm controller's manifest names no island (its bundle holds no island file) and no health port (no health
    probe watches it), and says `more_follows`: its userData is the bundle followed by the Slurm configuration
    (ndfleet/slurm/userdata.py), so only the first `size` bytes are checked against the sha256.

    `vault` (a Slurm stack's compute node): the bundle is read from Key Vault slot secrets from `first_slot`, not
    userData; each part names its slot and its text's sha256 (the slot's current value, or one of its versions);
    `tag` and `client_id_tag` are the scale set's tags naming the vault and the identity to read it with.

    `boot_version` (a compute node): the island's boot version, which replaces BOOT_VERSION_PLACEHOLDER in the
    bundle's files; prepare first renders the manifest with the placeholder itself to compute it (boot_version.py)."""
    optional: dict[str, Any] = {"island": island, "health_port": health_port, "boot_version": boot_version}
    if more_follows:
        optional["more_follows"] = True
    if vault is not None:
        optional["vault"] = {
            "tag": vault["tag"], "client_id_tag": vault["client_id_tag"], "tags_url": IMDS_TAGS_URL,
            "parts": [{"slot": name, "sha256": hashlib.sha256(text.encode()).hexdigest()}
                      for name, text in parts(bundle, first_slot).items()],
            "token_url": IMDS_VAULT_TOKEN_URL, "secret_url": SECRET_URL, "versions_url": VERSIONS_URL,
            "max_pages": VERSIONS_MAX_PAGES, "max_versions": VERSIONS_MAX_READ,
            "wait_s": VAULT_WAIT_S, "retry_s": VAULT_RETRY_S, "max_answer_bytes": MAX_SECRET_ANSWER_BYTES,
        }  # fmt: skip
    return {
        **{key: value for key, value in optional.items() if value is not None},
        "sha256": hashlib.sha256(bundle).hexdigest(),
        "size": len(bundle),
        "url": IMDS_USER_DATA_URL,
        "stamp": STAMP_PATH,
        "failed_marker": FAILED_MARKER,
        "attempts": FETCH_ATTEMPTS,
        "timeout_s": FETCH_TIMEOUT_S,
        "backoff_max_s": FETCH_BACKOFF_MAX_S,
        "command_timeout_s": COMMAND_TIMEOUT_S,
        "max_unpacked_bytes": MAX_UNPACKED_BYTES,
        "health_path": HEALTH_PATH,
    }


def split(raw: bytes) -> tuple[bytes, bytes]:
    """A userData's bytes -> (the bundle: its first xz stream, what follows it); BundleError when it does not begin
    with a whole xz stream of at most MAX_UNPACKED_BYTES. Only the Slurm controller's userData has something after
    its bundle (the Slurm configuration, ndfleet/slurm/userdata.py)."""
    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    try:
        text = decompressor.decompress(raw, MAX_UNPACKED_BYTES + 1)
    except lzma.LZMAError as e:
        raise BundleError(f"userData is not an xz stream: {e}") from None
    if len(text) > MAX_UNPACKED_BYTES or not decompressor.eof:
        raise BundleError(f"userData decompresses to more than {MAX_UNPACKED_BYTES:,} bytes or is truncated")
    rest = decompressor.unused_data
    return raw[: len(raw) - len(rest)], rest


def _bundle_file(entry: dict[str, Any]) -> MachineFile:
    """One entry of the bundle's `files`; ValueError, KeyError or TypeError when it is not one pack writes."""
    mode = entry["mode"]
    if not isinstance(mode, str) or len(mode) != 4 or not set(mode) <= set("01234567"):
        raise ValueError(f"mode {mode!r} is not four octal digits")
    return MachineFile(entry["path"], int(mode, 8), entry["data"].encode("latin-1"))


def unpack(
    user_data: str | bytes, island: str | None = None, boot_version: str | None = None
) -> tuple[list[MachineFile], list[list[str]]]:
    """A userData value (base64 text) or the bundle's bytes -> (files, activation commands), each file as the node
    of `island` writes it (the placeholders replaced by `island` and, when given, `boot_version`, as the boot step
    does). Raises BundleError, also when the bundle
    holds island-specific files and no island is given."""
    raw = user_data
    if isinstance(user_data, str):
        try:
            raw = base64.b64decode(user_data, validate=True)
        except ValueError:
            raise BundleError("userData is not base64") from None
    assert isinstance(raw, bytes)
    bundle, rest = split(raw)
    if rest:
        raise BundleError(f"userData holds {len(rest):,} bytes after the bundle: not a node bundle alone")
    try:
        doc = json.loads(lzma.decompress(bundle, format=lzma.FORMAT_XZ))
        files = [_bundle_file(f) for f in doc["files"]]
        activate = [[str(a) for a in argv] for argv in doc["activate"]]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise BundleError(f"userData is not a node bundle: {e}") from None
    if doc.get("format") != FORMAT:
        raise BundleError(f"userData bundle format {doc.get('format')!r}, expected {FORMAT}")
    try:
        token, paths = str(doc["island"]["placeholder"]).encode(), {str(p) for p in doc["island"]["paths"]}
    except (KeyError, TypeError) as e:
        raise BundleError(f"userData bundle has no valid island part: {e!r}") from None
    if paths - {f.path for f in files}:
        raise BundleError(f"userData bundle names island files it does not hold: {sorted(paths)}")
    if paths and island is None:
        raise BundleError(f"userData bundle holds island-specific files {sorted(paths)}: give the island")
    fill = island.encode() if island is not None else token
    files = [MachineFile(f.path, f.mode, f.data.replace(token, fill)) if f.path in paths else f for f in files]
    part = doc.get("boot_version", {"placeholder": BOOT_VERSION_PLACEHOLDER, "paths": []})
    try:
        version_token, version_paths = str(part["placeholder"]).encode(), {str(p) for p in part["paths"]}
    except (KeyError, TypeError) as e:
        raise BundleError(f"userData bundle has no valid boot_version part: {e!r}") from None
    fill = boot_version.encode() if boot_version is not None else version_token
    return [MachineFile(f.path, f.mode, f.data.replace(version_token, fill)) if f.path in version_paths else f
            for f in files], activate


__all__ = [
    "BundleError",
    "FORMAT",
    "IMDS_USER_DATA_URL",
    "BOOT_VERSION_PLACEHOLDER",
    "fill_island",
    "ISLAND_PLACEHOLDER",
    "MANIFEST_PATH",
    "STAMP_PATH",
    "UNPACK_PATH",
    "USER_DATA_MAX_BYTES",
    "USER_DATA_MAX_CHARS",
    "fetch_budget_s",
    "island_paths",
    "manifest",
    "pack",
    "SLOT_COUNT",
    "SLOT_NAMES",
    "SLOT_PLACEHOLDER",
    "first_slots",
    "part_names",
    "part_texts",
    "parts",
    "slot_count",
    "slot_values",
    "split",
    "unit_timeout_s",
    "unpack",
]
