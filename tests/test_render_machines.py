"""`ndfleet render` writes every file each machine of the plan receives, and nothing else: for each example stack,
each scale set's and each Slurm VM's customData and userData are decoded the way the machine decodes them (cloud-init
`write_files`; a compute node's bundle as templates/node/ndfleet-unpack.py unpacks it,
ndfleet/nodefiles/nodebundle.py; a Slurm
machine's configuration as ndfleet-slurm-config reads it) and compared with the folder `render` wrote for it."""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from ndfleet.cli import main
from ndfleet.machine_files import RAW_FILES
from ndfleet.nodefiles import nodebundle
from ndfleet.plans.build import run_plan
from ndfleet.slurm.userdata import decompose
from ndfleet.stackconfig.stackfile import load_stack
from tests.conftest import EXAMPLE_STACKS

VMSS = "azure-native:compute:VirtualMachineScaleSet"
VM = "azure-native:compute:VirtualMachine"
SECRET = "azure-native:keyvault:Secret"
PART_FILE = re.compile(r"ndfleet-bundle-[0-9]+\.b64")  # a Key Vault slot holding a part of the bundle, as it is sent


@functools.lru_cache(maxsize=8)
def plan_doc(stack: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(run_plan(load_stack(name=stack)).to_json())
    return doc


@functools.lru_cache(maxsize=8)
def rendered(stack: str, out: str) -> Path:
    assert main(["render", "--stack", stack, "--out", out]) == 0
    return Path(out)


@pytest.fixture(scope="module")
def render_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("render")


def written_content(entry: dict[str, str]) -> bytes:
    """A write_files entry's bytes as cloud-init writes them: plain text, or `encoding: gz+b64` (base64, then
    gunzip; cloudinit.readthedocs.io/en/latest/reference/modules.html#write-files); no other encoding is rendered."""
    encoding = entry.get("encoding")
    assert encoding in (None, "gz+b64"), entry["path"]
    if encoding == "gz+b64":
        return gzip.decompress(base64.b64decode(entry["content"], validate=True))
    return entry["content"].encode()


def vault_secrets(stack: str) -> dict[str, str]:
    """The Key Vault secrets whose value the plan holds (the compute bundle's parts): name -> value."""
    found = {}
    for r in plan_doc(stack)["resources"]:
        props = r["inputs"].get("properties") if r["type"] == SECRET else None
        if isinstance(props, dict) and isinstance(props.get("value"), str):  # a Pulumi secret is "[secret]"
            found[r["inputs"]["secretName"]] = props["value"]
    return found


def received(custom_data: str, user_data: str, compute: bool, secrets: dict[str, str]) -> list[bytes]:
    """Every file the machine writes from its customData and userData (a Slurm stack's compute node: the Key Vault
    parts its manifest names, from the plan's secrets), decoded as the machine decodes them."""
    cloud_config = yaml.safe_load(gzip.decompress(base64.b64decode(custom_data)))
    files = [written_content(f) for f in cloud_config["write_files"]]
    if compute:  # the boot step fills in the island its manifest (customData) names
        manifest = json.loads(written_content(
            next(f for f in cloud_config["write_files"] if f["path"] == nodebundle.MANIFEST_PATH)))  # fmt: skip
        if "vault" in manifest:
            assert not user_data
            user_data = "".join(secrets[part["slot"]] for part in manifest["vault"]["parts"])
        bundle_files, _ = nodebundle.unpack(user_data, manifest["island"], manifest["boot_version"])
        files += [f.data for f in bundle_files]
    elif user_data:  # a Slurm machine: the controller's library bundle (its boot step unpacks it), the configuration
        library, doc = decompose(user_data)
        files += [f.data for f in nodebundle.unpack(library)[0]] if library else []
        files += [c.encode() for c in doc["files"].values()]
    return files


def machines_in_plan(stack: str) -> dict[str, tuple[str, str, bool]]:
    """Each machine of the plan: its render folder (relative) -> (customData, userData, is a compute node)."""
    doc = plan_doc(stack)
    scale_sets = [r for r in doc["resources"] if r["type"] == VMSS]
    found: dict[str, tuple[str, str, bool]] = {}
    for r in scale_sets:
        island = re.fullmatch(rf"{stack}-(.+)-vmss", r["name"])
        assert island, r["name"]
        profile = r["inputs"]["virtualMachineProfile"]
        folder = "compute" if len(scale_sets) == 1 else f"compute/{island.group(1)}"
        found[folder] = (profile["osProfile"]["customData"], profile.get("userData", ""), True)
    for r in (r for r in doc["resources"] if r["type"] == VM):
        role = r["inputs"]["tags"]["ndfleet:slurm-role"]
        machine = (r["inputs"]["osProfile"]["customData"], r["inputs"].get("userData", ""), False)
        folder = f"slurm-{role}"
        assert found.setdefault(folder, machine) == machine, f"two {role} VMs receive different files"
    return found


def written(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def digests(contents: list[bytes]) -> Counter[str]:
    return Counter(hashlib.sha256(c).hexdigest() for c in contents)


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_render_has_one_folder_per_machine_of_the_plan(stack: str, render_root: Path) -> None:
    out = rendered(stack, str(render_root / stack))
    folders = {str(p.parent.relative_to(out)) for p in out.rglob("custom-data.b64")}
    assert folders == set(machines_in_plan(stack))


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_render_writes_exactly_the_files_each_machine_receives(stack: str, render_root: Path) -> None:
    out = rendered(stack, str(render_root / stack))
    for folder, (custom_data, user_data, compute) in machines_in_plan(stack).items():
        files = written(out / folder)
        carried = [data for name, data in files.items() if name not in RAW_FILES and not PART_FILE.fullmatch(name)]
        assert digests(carried) == digests(received(custom_data, user_data, compute, vault_secrets(stack))), folder


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_render_writes_the_machines_inputs_as_the_plan_has_them(stack: str, render_root: Path) -> None:
    out = rendered(stack, str(render_root / stack))
    for folder, (custom_data, user_data, _) in machines_in_plan(stack).items():
        files = written(out / folder)
        assert files["custom-data.b64"].decode() == custom_data + "\n", folder
        assert files["user-data"] == gzip.decompress(base64.b64decode(custom_data)), folder
        assert files.get("vm-user-data.b64", b"\n").decode() == user_data + "\n", folder
        parts = {name.removesuffix(".b64"): data for name, data in files.items() if PART_FILE.fullmatch(name)}
        assert parts == {n: (v + "\n").encode() for n, v in vault_secrets(stack).items() if n in parts}, folder
