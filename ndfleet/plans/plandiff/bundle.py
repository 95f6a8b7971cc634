"""The files in a plan's `userData`, decoded so that a diff shows the lines that change in the files a machine
receives (slurm.conf's `MaxNodeCount=10` -> `MaxNodeCount=12`), not two hashes. Two forms: a compute node's bundle
(ndfleet/nodefiles/nodebundle.py packs it: base64 of xz of a JSON list of files) and a Slurm machine's
configuration, after the controller's library bundle (ndfleet/slurm/userdata.py: base64 of [bundle] gzip JSON
{"version", "files"}).

A plan from disk is untrusted: `nodebundle.unpack` stops decompressing at its bound (4 MiB; a bundle is about
200 KB), every line shown is made terminal-safe (ndfleet/azure/text.py) and cut at `MAX_LINE_CHARS`, and a bundle
diff is cut at `MAX_DIFF_LINES` lines, saying how many more there were.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from ndfleet.azure.text import terminal_safe
from ndfleet.nodefiles.nodebundle import ISLAND_PLACEHOLDER, PART_PREFIX, BundleError, unpack
from ndfleet.plans.resource_types import VMSS_TYPE
from ndfleet.slurm.userdata import UserDataError, decompose

USER_DATA_KEY = "userData"
# Where the diff puts a scale set's bundle that travels in Key Vault parts (with_vault_bundles): decoded as
# a bundle in userData is.
VAULT_BUNDLE_KEY = "nodeBundleFromKeyVault"
# The activation commands are part of the bundle; shown as a file of this name, one command a line.
ACTIVATE_ENTRY = "(activate)"
# A Slurm machine's userData names the Slurm release it installs; shown as a file of this name.
RELEASE_ENTRY = "(slurm release)"
MAX_DIFF_LINES = 400
MAX_LINE_CHARS = 300


def is_user_data(path: str) -> bool:
    return any(path == key or path.endswith("." + key) for key in (USER_DATA_KEY, VAULT_BUNDLE_KEY))


def decode_bundle(value: Any) -> dict[str, bytes] | None:
    """The files a userData value carries, by path: a compute node's bundle (and its activation commands) or a
    Slurm machine's configuration (and its Slurm release); None when `value` is neither. Do not modify the result."""
    if not isinstance(value, str) or not value:
        return None
    return _decode(value)


# One diff reads each changed userData several times (its size, its consequence, its lines): decoded once.
@functools.lru_cache(maxsize=16)
def _decode(value: str) -> dict[str, bytes] | None:
    try:
        # A compute bundle is island-neutral: its island files hold the placeholder where the node writes its island's
        # name (nodebundle), and the diff shows them so. Without it, no real compute bundle decoded and its diff was
        # two hashes (found while moving the bundle to Key Vault).
        files, activate = unpack(value, ISLAND_PLACEHOLDER)
    except BundleError:
        return _machine_files(value)
    out = {f.path: f.data for f in files}
    out[ACTIVATE_ENTRY] = "\n".join(" ".join(argv) for argv in activate).encode()
    return out


def _machine_files(value: str) -> dict[str, bytes] | None:
    """A Slurm controller's or login node's userData (ndfleet/slurm/userdata.py `decompose` reads it, bounded): the
    controller's library bundle, if any, then the Slurm release and configuration files."""
    try:
        bundle, doc = decompose(value)
        files = unpack(bundle)[0] if bundle else []
    except (UserDataError, BundleError):
        return None
    out = {f.path: f.data for f in files}
    out.update({path: text.encode() for path, text in doc["files"].items()})
    out[RELEASE_ENTRY] = str(doc.get("version", "")).encode()
    return out


def _text(data: bytes | None) -> str | None:
    """The file as text; None for a binary file (the node program's zipapp)."""
    if data is None:
        return ""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _digest(data: bytes | None) -> str:
    return "(absent)" if data is None else f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}"


def _label(side: str, path: str) -> str:
    return f"{side}{path}" if path.startswith("/") else f"{side}/{path}"


def changed_files(old: Any, new: Any) -> list[str] | None:
    """Paths of the bundle files that differ; None when neither side is a bundle."""
    a, b = decode_bundle(old), decode_bundle(new)
    if a is None and b is None:
        return None
    a, b = a or {}, b or {}
    return [path for path in sorted(set(a) | set(b)) if a.get(path) != b.get(path)]


def bundle_diff(old: Any, new: Any) -> list[str]:
    """The changed lines of every changed file of the bundle, as a unified diff without context (a binary file as
    its size and sha256 before and after); [] when neither side is a bundle. Terminal-safe and bounded."""
    a, b = decode_bundle(old), decode_bundle(new)
    if a is None and b is None:
        return []
    a, b = a or {}, b or {}
    lines: list[str] = []
    for path in sorted(set(a) | set(b)):
        da, db = a.get(path), b.get(path)
        if da == db:
            continue
        ta, tb = _text(da), _text(db)
        if ta is None or tb is None:
            lines.append(f"~ {path}: binary, {_digest(da)} -> {_digest(db)}")
            continue
        lines += difflib.unified_diff(
            ta.splitlines(), tb.splitlines(), _label("base", path), _label("head", path), n=0, lineterm=""
        )
    shown = [terminal_safe(line, limit=MAX_LINE_CHARS, squeeze=False) for line in lines[:MAX_DIFF_LINES]]
    if len(lines) > MAX_DIFF_LINES:
        shown.append(f"... {len(lines) - MAX_DIFF_LINES} more lines (`ndfleet render` writes the whole bundle)")
    return shown


def describe(old: Any, new: Any) -> str | None:
    """`node bundle: 2 files change (etc/slurm/slurm.conf, ...)`, or None when neither side is a bundle."""
    files = changed_files(old, new)
    if files is None:
        return None
    shown = ", ".join(terminal_safe(f, limit=80) for f in files[:4]) + (", ..." if len(files) > 4 else "")
    return f"node bundle: {len(files)} file{'s' if len(files) != 1 else ''} change ({shown})"


SECRET_TYPE = "azure-native:keyvault:Secret"
# A slot of the Slurm vault holding parts of compute bundles (nodebundle.SLOT_NAMES): its number.
_PART_NAME = re.compile(re.escape(PART_PREFIX) + r"([0-9]{1,3})")


def _vault_bundles(plan: Mapping[str, Any]) -> dict[str, str]:
    """The slots' values the plan writes: slot name -> its base64 part (or the unused placeholder)."""
    slots: dict[str, str] = {}
    for r in plan.get("resources", ()):
        props = (r.get("inputs") or {}).get("properties") if r.get("type") == SECRET_TYPE else None
        name = (r.get("inputs") or {}).get("secretName")
        match = _PART_NAME.fullmatch(name) if isinstance(name, str) else None
        if match and isinstance(name, str) and isinstance(props, dict) and isinstance(props.get("value"), str):
            slots[name] = props["value"]
    return slots


def with_vault_bundles(
    plan: Mapping[str, Any] | None, decode_custom_data: Callable[[Any], str | None]
) -> Mapping[str, Any] | None:
    """The plan with each scale set whose boot step reads its bundle from Key Vault parts (a Slurm stack's compute
    nodes, docs/bootstrap.md) carrying that bundle under `virtualMachineProfile.nodeBundleFromKeyVault`: the diff
    then decodes the files a node receives, as it does for a bundle in userData, instead of showing parts of base64.
    The key is the diff's, not the scale set's: nothing of it is sent to Azure."""
    if plan is None:
        return None
    bundles = _vault_bundles(plan)
    if not bundles:
        return plan
    resources = []
    for r in plan.get("resources", ()):
        profile = (r.get("inputs") or {}).get("virtualMachineProfile") if r.get("type") == VMSS_TYPE else None
        if isinstance(profile, dict):
            text = decode_custom_data((profile.get("osProfile") or {}).get("customData")) or ""
            # The manifest names its slots in order (each with its part's sha256): the bundle is their values joined.
            named = list(dict.fromkeys(m.group(0) for m in _PART_NAME.finditer(text)))
            if named and set(named) <= set(bundles):
                profile = {**profile, VAULT_BUNDLE_KEY: "".join(bundles[n] for n in named)}
                r = {**r, "inputs": {**r["inputs"], "virtualMachineProfile": profile}}
        resources.append(r)
    return {**plan, "resources": resources}
