"""The Slurm controller gets the node-program modules it runs as one archive, built like the nodes' zipapp, holding
what its own `python3 -m ndfleet_node...` lines need, found from their imports (no list kept by hand)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ndfleet.nodefiles import nodeapp
from ndfleet.nodefiles.bootstrap import CUSTOM_DATA_MAX_BYTES
from ndfleet.slurm.machines import NODE_LIBRARY, machine_bootstrap
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.conftest import base_config
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


def test_the_controller_customdata_keeps_a_fifth_of_azures_limit_spare() -> None:
    # As the nodes' userData (tests/test_bootstrap.py): room for what the controller's programs add. Only what the
    # modules import when they load is shipped; an import inside a function (impact_categories -> the validator's
    # checks and parsers) would take it to 88 %.
    for stack in ("dev", "prod"):
        rendered = machine_bootstrap(load_spec(load_stack(stack).ndfleet_config, stack), "controller")
        assert len(rendered.custom_data_bytes) <= CUSTOM_DATA_MAX_BYTES * 4 // 5, stack
