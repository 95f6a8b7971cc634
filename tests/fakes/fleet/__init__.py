"""A simulated fleet for the burn-in: fake `mpirun` and `all_reduce_perf` (bin/) driven by one JSON file.

`FakeFleet(tmp_path, hosts=16, bad_hca=[...], hang=[...], wrong=[...], down=[...])` writes the hostfile, the fleet
JSON and the node JSON the tool renders for an ND H100 v5 stack (`node_json_data`), with the fakes as the
launcher and the test binary; `env()` is what the burn-in process needs on top of the real environment.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ndfleet.nodefiles.nodeconfig import node_config
from ndfleet.stackconfig.config import load_spec

FLEET_BIN = Path(__file__).resolve().parent / "bin"
# HPC-X as the Azure HPC image lays it out (hpcx-init.sh + hpcx_load), stood in: its mpirun is the fake fleet's.
FAKE_HPCX_INIT = Path(__file__).resolve().parent.parent / "hpcx" / "hpcx-init.sh"


def node_json_data(**sections: Any) -> dict[str, Any]:
    """The node JSON `ndfleet` renders for a 2-node ND H100 v5 stack, with top-level sections replaced."""
    from tests.conftest import base_config

    spec = load_spec(base_config(), "fleet")
    return node_config(spec, spec.islands[0]) | sections


def host_names(count: int) -> list[str]:
    return [f"nd-ib00{i:06d}" for i in range(count)]


@dataclass
class FakeFleet:
    root: Path
    hosts: list[str]
    bad_hca: list[str] = field(default_factory=list)
    hang: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    down: list[str] = field(default_factory=list)
    barrier: int = 0

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.hostfile.write_text("# island ib00\n" + "\n".join(self.hosts) + "\n")
        fleet: dict[str, Any] = {"bad_hca": self.bad_hca, "hang": self.hang, "wrong": self.wrong, "down": self.down}
        if self.barrier:
            fleet |= {"barrier": self.barrier, "barrier_dir": str(self.root / "barrier")}
        self.fleet_file.write_text(json.dumps(fleet))
        doc = node_json_data()
        doc["burnin"] |= {"mpirun": str(FLEET_BIN / "mpirun"), "all_reduce_perf": str(FLEET_BIN / "all_reduce_perf"),
                          "hpcx_init": str(FAKE_HPCX_INIT)}  # fmt: skip
        self.node_json.write_text(json.dumps(doc))

    @property
    def hostfile(self) -> Path:
        return self.root / "hostfile"

    @property
    def fleet_file(self) -> Path:
        return self.root / "fleet.json"

    @property
    def node_json(self) -> Path:
        return self.root / "node.json"

    @property
    def pid_log(self) -> Path:
        return self.root / "pids"

    @property
    def report(self) -> Path:
        return self.root / "report.json"

    @property
    def bad(self) -> set[str]:
        return set(self.bad_hca) | set(self.hang) | set(self.wrong) | set(self.down)

    def env(self) -> dict[str, str]:
        return {
            "NDFLEET_FAKE_FLEET": str(self.fleet_file),
            "NDFLEET_FAKE_PIDS": str(self.pid_log),
            "PATH": f"{FLEET_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def spawned_pids(self) -> list[int]:
        if not self.pid_log.exists():
            return []
        return [int(p) for line in self.pid_log.read_text().split("\n") if line for p in line.split()]
