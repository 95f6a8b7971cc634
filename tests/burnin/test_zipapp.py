"""The burn-in as nodes receive it: the node program's zipapp (comments and docstrings stripped) runs a burn-in
over the fake fleet and pins the bad host, and carries the impact command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ndfleet.nodefiles import nodeapp
from tests.fakes.fleet import FakeFleet, host_names


def test_zipapp_burnin_pins_the_bad_host(tmp_path: Path) -> None:
    app = tmp_path / "ndfleet-node"
    app.write_bytes(nodeapp.build())
    names = host_names(6)
    fleet = FakeFleet(tmp_path / "fleet", names, bad_hca=[names[3]])
    cmd = [sys.executable, str(app), "burnin", "--hostfile", str(fleet.hostfile), "--report", str(fleet.report),
           "--config", str(fleet.node_json), "--test-timeout", "60"]  # fmt: skip
    run = subprocess.run(cmd, env={**os.environ, **fleet.env()}, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert json.loads(fleet.report.read_text())["unhealthy"] == [names[3]]
    helptext = subprocess.run([sys.executable, str(app), "impact", "report", "--help"], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
    assert helptext.returncode == 0 and "--validator-report" in helptext.stdout
