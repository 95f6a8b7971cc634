"""`ndfleet-node slurm-export` on the controller: scontrol's node list as the metric `ndfleet status` joins."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ndfleet_node import slurm_export

from ndfleet.status.metrics_view import SLURM_STATES as STATUS_SLURM_STATES
from ndfleet.status.prometheus import SLURM_METRIC

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"
STATES = (DATA / "scontrol-show-node-states.txt").read_text()


def fake_scontrol(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "scontrol"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def export(tmp_path: Path, scontrol: Path, timeout: str = "20") -> tuple[int, str]:
    out = tmp_path / "textfile" / "ndfleet_slurm.prom"
    sacct = tmp_path / "sacct"  # accounting with no requeued job (the jobs: tests/node/test_slurm_export_jobs.py)
    sacct.write_text("#!/bin/sh\n")
    sacct.chmod(0o755)
    code = slurm_export.main(["--out", str(out), "--scontrol", str(scontrol), "--sacct", str(sacct), "--timeout",
                              timeout])  # fmt: skip
    return code, out.read_text()


def test_every_state_is_named() -> None:
    assert slurm_export.node_states(STATES) == [
        ("prod-ib00-000000", "idle", ""),
        ("prod-ib00-000001", "allocated", ""),
        ("prod-ib00-000002", "mixed", ""),
        ("prod-ib00-000003", "drained", "ndfleet:gpu.nvlink"),
        ("prod-ib00-000004", "draining", "ndfleet:ib.ports"),
        ("prod-ib01-000000", "awaiting_burnin", "ndfleet:burnin:awaiting"),
        ("prod-ib01-000001", "drained", 'maintenance "rack 7" back at State=IDLE'),
        ("prod-ib01-000002", "powered_down", ""),
        ("prod-ib01-000003", "down", "Not responding"),
        ("prod-ib01-000004", "other", ""),
    ]


def test_not_responding_node_is_down() -> None:
    text = (DATA / "scontrol-show-node-oneliner.txt").read_text()
    assert slurm_export.node_states(text)[1] == ("prod-ib00-000004", "down", "Not responding")


def test_every_state_the_export_writes_is_one_status_reads() -> None:
    """Each State= word the controller may see maps to a state `status` knows (names.SLURM_STATES, plus absent)."""
    words = ["IDLE", "ALLOCATED", "MIXED", "COMPLETING", "IDLE+DRAIN", "ALLOCATED+DRAIN", "DOWN", "IDLE+POWERED_DOWN",
             "IDLE+CLOUD+POWERED_DOWN", "FUTURE", "REBOOT_REQUESTED", "IDLE+NOT_RESPONDING"]
    assert {slurm_export.slurm_state(w.split("+"), "") for w in words} <= set(STATUS_SLURM_STATES)


def test_reason_is_escaped_in_the_label() -> None:
    text = slurm_export.render([("prod-ib01-000001", "drained", 'rack "7" \\ x')], now=1.0)
    assert (f'{SLURM_METRIC}{{slurm_node="prod-ib01-000001",state="drained",reason="rack \\"7\\" \\\\ x",'
            'boot_version=""} 1') in text


def test_export_writes_one_series_per_node(tmp_path: Path) -> None:
    code, text = export(tmp_path, fake_scontrol(tmp_path, f"cat '{DATA / 'scontrol-show-node-states.txt'}'"))
    assert code == 0
    assert sum(line.startswith(f"{SLURM_METRIC}{{") for line in text.splitlines()) == 10
    assert "ndfleet_slurm_export_success 1" in text


@pytest.mark.parametrize("body", ["sleep 30", "echo 'slurm_load_node error' >&2; exit 1"], ids=["hangs", "fails"])
def test_failed_scontrol_publishes_no_states(tmp_path: Path, body: str) -> None:
    code, text = export(tmp_path, fake_scontrol(tmp_path, body), timeout="2")
    assert code == 1
    assert f"{SLURM_METRIC}{{" not in text
    assert "ndfleet_slurm_export_success 0" in text


def test_failed_run_replaces_earlier_states(tmp_path: Path) -> None:
    export(tmp_path, fake_scontrol(tmp_path, f"cat '{DATA / 'scontrol-show-node-states.txt'}'"))
    _, text = export(tmp_path, fake_scontrol(tmp_path, "exit 1"))
    assert f"{SLURM_METRIC}{{" not in text
    assert not [p for p in os.listdir(tmp_path / "textfile") if p.startswith(".ndfleet-")]  # no temporary left


def test_a_node_in_its_islands_spares_reservation_is_published_as_spare(tmp_path: Path) -> None:
    # The recorded reservation (Slurm 22.05's answer for ndfleet_node.spares' reservation) holds prod-ib00-000003;
    # the same node idle in the recorded listing is a spare, the others keep their states.
    listing = (DATA / "scontrol-show-node-oneliner.txt").read_text().split("\n")[0]
    spare_line = listing.replace("prod-ib00-000000", "prod-ib00-000003")
    nodes = tmp_path / "nodes.txt"
    nodes.write_text(listing + "\n" + spare_line + "\n")
    body = (f'case "$1 $2" in "show node") cat "{nodes}";; '
            f'"show reservation") cat "{DATA / "scontrol-show-reservation-oneliner.txt"}";; '
            '"show hostnames") echo "$3";; esac')
    code, text = export(tmp_path, fake_scontrol(tmp_path, body))
    assert code == 0
    assert 'ndfleet_slurm_node_state{slurm_node="prod-ib00-000003",state="spare",reason="",boot_version=""} 1' in text
    assert 'ndfleet_slurm_node_state{slurm_node="prod-ib00-000000",state="idle",reason="",boot_version=""} 1' in text


def test_each_node_series_carries_the_boot_version_it_registered_with() -> None:
    """Issue 42: the `boot-<version>` feature a node registered with (ndfleet/slurm/conf.py) is a label of its one
    state series; a node without one (the recorded 25.11 listing's: island feature only) has it empty."""
    recorded = (DATA / "scontrol-show-node-oneliner.txt").read_text()
    first = recorded.split("\n")[0]
    rolled = first.replace("AvailableFeatures=island-ib00 ", "AvailableFeatures=island-ib00,boot-0123456789ab ")
    assert rolled != first
    versions = slurm_export.node_versions(rolled + "\n" + "\n".join(recorded.split("\n")[1:]))
    assert versions["prod-ib00-000000"] == "0123456789ab"
    assert set(list(versions.values())[1:]) == {""}
    assert slurm_export.node_versions(first.replace("island-ib00 ", "island-ib00,boot-NOTHEX ")) == {
        "prod-ib00-000000": ""
    }
    states = slurm_export.node_states(rolled)
    text = slurm_export.render(states, now=1.0, versions=slurm_export.node_versions(rolled))
    series = [line for line in text.splitlines() if line.startswith(f"{SLURM_METRIC}{{")]
    assert series == [f'{SLURM_METRIC}{{slurm_node="prod-ib00-000000",state="idle",reason="",'
                      'boot_version="0123456789ab"} 1']
