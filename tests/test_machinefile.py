"""One machine-file shape (MachineFile: path, integer mode, bytes) from every feature, merged generically."""

from __future__ import annotations

import base64
import json
import lzma

import pytest

from ndfleet.monitoring import agent
from ndfleet.nodefiles import nodebundle
from ndfleet.nodefiles.bootstrap import BootstrapExtensions, merge_extensions, neutral_island
from ndfleet.nodefiles.machinefile import MachineFile, render_name
from ndfleet.prepare import bootstrap_extensions
from ndfleet.slurm import machines as slurm
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack


def spec_of(stack: str):  # type: ignore[no-untyped-def]
    return load_spec(load_stack(stack).ndfleet_config, stack)


@pytest.mark.parametrize("mode", ["0644", 0o4755, -1, True, 420.0])
def test_a_mode_that_is_not_permission_bits_as_an_integer_is_refused(mode: object) -> None:
    with pytest.raises(ValueError, match="/etc/x"):
        MachineFile("/etc/x", mode, b"")  # type: ignore[arg-type]


def test_a_relative_path_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        MachineFile("etc/x", 0o644, b"")


def test_the_render_name_is_the_base_name_or_the_drop_in_folder_and_name() -> None:
    assert MachineFile("/usr/local/sbin/x", 0o755, b"").name == "x"
    assert render_name("/etc/systemd/system/slurmd.service.d/ndfleet.conf") == "slurmd.service.d-ndfleet.conf"
    assert MachineFile("/usr/local/lib/ndfleet/ndfleet_node/a.py", 0o644, b"", "ndfleet_node/a.py").name == (
        "ndfleet_node/a.py"
    )


def test_every_feature_gives_the_one_shape() -> None:
    prod = spec_of("prod")  # Slurm and monitoring on
    island = prod.islands[0]
    files = [
        *slurm.slurm_node_files(prod, island),
        *agent.node_files(prod, island),
        *agent.controller_files(prod, slurm.LIB_DIR),
    ]
    assert files and all(type(f) is MachineFile for f in files)


def test_prepare_merges_the_features_in_order_without_naming_them() -> None:
    prod = spec_of("prod")
    island = prod.islands[0]
    merged = bootstrap_extensions(prod, island)
    # rendered for the bundle's placeholder island: the boot step fills in the island's name (nodebundle)
    neutral = neutral_island(island)
    parts = [slurm.bootstrap_extensions(prod, neutral), agent.bootstrap_extensions(prod, neutral)]
    assert merged == merge_extensions(parts)
    assert merged is not None and [f.path for f in merged.files] == [f.path for p in parts if p for f in p.files]
    assert merged.enable_units == [slurm.SETUP_UNIT, *agent.ENABLE_UNITS]
    # a stack with neither feature adds nothing
    h200 = spec_of("h200")
    assert h200.scheduler != "slurm" and not h200.monitoring.enabled
    assert bootstrap_extensions(h200, h200.islands[0]) is None


def test_two_features_filling_one_node_json_section_are_refused() -> None:
    a = BootstrapExtensions(node_sections={"slurm": {"a": 1}})
    b = BootstrapExtensions(node_sections={"slurm": {"b": 2}})
    with pytest.raises(ValueError, match="slurm"):
        merge_extensions([a, b])
    assert merge_extensions([None, None]) is None


def test_the_bundle_writes_the_mode_as_four_octal_digits_and_reads_it_back() -> None:
    packed = nodebundle.pack([MachineFile("/usr/local/sbin/x", 0o755, b"#!/bin/sh\n")], [])
    doc = json.loads(lzma.decompress(packed))
    assert doc["files"][0]["mode"] == "0755"
    files, _ = nodebundle.unpack(base64.b64encode(packed).decode())
    assert files == [MachineFile("/usr/local/sbin/x", 0o755, b"#!/bin/sh\n")]


@pytest.mark.parametrize("mode", ["644", "0o644", "rwxr-xr-x", 420, "0999"])
def test_a_bundle_mode_that_pack_would_not_write_is_refused(mode: object) -> None:
    doc = {"format": nodebundle.FORMAT, "files": [{"path": "/etc/x", "mode": mode, "data": ""}], "activate": []}
    raw = lzma.compress(json.dumps(doc).encode(), format=lzma.FORMAT_XZ)
    with pytest.raises(nodebundle.BundleError, match="mode"):
        nodebundle.unpack(raw)
