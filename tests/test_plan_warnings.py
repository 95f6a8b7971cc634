"""What `ndfleet plan` warns about, and that each warning is printed once (the table, or stderr beside JSON)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.derive import EXAMPLE_KEY_WARNING
from tests.conftest import REPO, base_config

NDFLEET = Path(sys.prefix) / "bin" / "ndfleet"
SLURM_WITHOUT_BASTION = "ndfleet:scheduler = 'slurm' with ndfleet:bastion off: the login node has no public address"


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_example_key_warning_is_printed_once(fmt: str) -> None:
    proc = subprocess.run([str(NDFLEET), "plan", "--stack", "dev", "--format", fmt], cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # JSON carries the warnings as data (docs/plan-json.md); what is printed for a person is the table or stderr.
    printed = proc.stdout + proc.stderr if fmt == "table" else proc.stderr
    assert printed.count(EXAMPLE_KEY_WARNING) == 1


def test_slurm_without_bastion_warns_that_the_login_node_is_unreachable() -> None:
    spec = load_spec(base_config(scheduler="slurm", bastion=False), "t")
    assert [w for w in spec.warnings if w.startswith(SLURM_WITHOUT_BASTION)] == [
        SLURM_WITHOUT_BASTION + ", so it is reachable only from inside the VNet (a peered network or VPN); set "
        "ndfleet:bastion: true to reach it through Azure Bastion"
    ]


@pytest.mark.parametrize("config", [{"scheduler": "slurm", "bastion": True}, {"bastion": False}])
def test_no_login_node_warning_with_bastion_or_without_slurm(config: dict[str, object]) -> None:
    spec = load_spec(base_config(**config), "t")
    assert not any(w.startswith(SLURM_WITHOUT_BASTION) for w in spec.warnings)
