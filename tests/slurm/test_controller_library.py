"""The Slurm controller gets the node-program modules it runs as one archive, built like the nodes' zipapp, holding
what its own `python3 -m ndfleet_node...` lines need, found from their imports (no list kept by hand)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ndfleet.nodefiles import nodeapp, nodebundle
from ndfleet.nodefiles.bootstrap import CUSTOM_DATA_MAX_BYTES, USER_DATA_MAX_BYTES
from ndfleet.slurm.machines import NODE_LIBRARY, controller_bundle, machine_bootstrap, machine_user_data
from ndfleet.slurm.userdata import decompose
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.conftest import EXAMPLE_STACKS, base_config
from tests.slurm.controller_library import library_modules, written_library

TIMEOUT_S = 60


@pytest.mark.parametrize("monitoring", [False, True])
def test_every_module_the_controller_runs_starts_from_the_archive_alone(monitoring: bool, tmp_path: Path) -> None:
    on = {"enabled": monitoring, "emails": ["a@example.com"]}
    spec = load_spec(base_config(scheduler="slurm", monitoring=on), "t")
    rendered = machine_bootstrap(spec, "controller")
    lib = written_library(spec, tmp_path)
    runs = sorted({m for text in rendered.files.values() for m in re.findall(r"python3 -m (ndfleet_node[\w.]+)", text)})
    assert {"ndfleet_node.slurm_reap", "ndfleet_node.burnin.slurm", "ndfleet_node.elastic.programs"} <= set(runs)
    assert all(f"PYTHONPATH={NODE_LIBRARY}" in t for t in rendered.files.values() if "python3 -m ndfleet_node" in t)
    for module in runs:
        # -S: no site-packages, where the test's own ndfleet_node is installed; only the archive can answer.
        proc = subprocess.run(
            [sys.executable, "-S", "-m", module, "--help"], capture_output=True, text=True, timeout=TIMEOUT_S,
            cwd=tmp_path, env={"PYTHONPATH": str(lib)}, check=False,
        )  # fmt: skip
        assert proc.returncode == 0 and "usage:" in proc.stdout, (module, proc.stderr[-2000:])


def test_the_archive_holds_the_import_closure_and_no_node_only_module(tmp_path: Path) -> None:
    names = library_modules(load_spec(base_config(scheduler="slurm"), "t"), tmp_path)
    assert "ndfleet_node/elastic/arm.py" in names  # what elastic.programs imports
    assert "ndfleet_node/checks/__init__.py" not in names and "__main__.py" not in names  # validation is node-only


def test_an_entry_that_is_no_module_of_the_node_program_is_refused() -> None:
    with pytest.raises(ValueError, match="ndfleet_node.no_such"):
        nodeapp.import_closure(["ndfleet_node.no_such"])


def _bench_spec() -> ClusterSpec:
    """The 103-island stack of tests/bench/plan_scale.py: 10,240 nodes in islands of 100, the dev stack otherwise."""
    config = {**load_stack("dev").ndfleet_config, "nodes": 10_240, "maxNodesPerIsland": 100}
    return load_spec(config, "dev")


SLURM_STACKS = [s for s in EXAMPLE_STACKS if load_stack(s).ndfleet_config.get("scheduler") == "slurm"]


@pytest.mark.parametrize("stack", [*SLURM_STACKS, "bench-103-islands"])
def test_the_library_travels_in_userdata_and_both_parts_keep_a_fifth_of_azures_limit_spare(stack: str) -> None:
    # customData was at 79 % with the library in it (51,888 bytes, prod): it now carries the boot step, programs and
    # units. The library bundle and the Slurm configuration (103 islands: the largest) share userData.
    spec = _bench_spec() if stack.startswith("bench") else load_spec(load_stack(stack).ndfleet_config, stack)
    rendered = machine_bootstrap(spec, "controller")
    written = {f["path"] for f in yaml.safe_load(rendered.user_data)["write_files"]}
    assert NODE_LIBRARY not in written and nodebundle.UNPACK_PATH in written, stack
    assert len(rendered.custom_data_bytes) <= CUSTOM_DATA_MAX_BYTES * 2 // 5, stack  # well under the budget
    user_data = machine_user_data(spec, "controller")
    assert len(base64.b64decode(user_data)) <= USER_DATA_MAX_BYTES * 4 // 5, stack
    library, config = decompose(user_data)
    assert NODE_LIBRARY in {f.path for f in nodebundle.unpack(library)[0]}
    assert "/etc/slurm/slurm.conf" in config["files"]


def test_the_controller_customdata_names_the_library_bundle_at_the_head_of_its_userdata() -> None:
    # The boot step refuses any other bundle: customData and userData must come from one rendering.
    spec = load_spec(load_stack("prod").ndfleet_config, "prod")
    cloud_config = yaml.safe_load(machine_bootstrap(spec, "controller").user_data)
    written = {f["path"]: f["content"] for f in cloud_config["write_files"]}
    manifest = json.loads(written[nodebundle.MANIFEST_PATH])
    library, _ = decompose(machine_user_data(spec, "controller"))
    assert (manifest["size"], manifest["more_follows"]) == (len(library), True)
    assert library == controller_bundle(spec) and manifest["sha256"] == hashlib.sha256(library).hexdigest()
    assert "island" not in manifest and "health_port" not in manifest  # no island files, no health probe
