"""Every node gets the burn-in and impact sections in its node JSON, and a failed validation starts the impact
report (the validate unit's ExecStopPost, in a transient unit with its own time limit)."""

from __future__ import annotations

import json

import pytest

from ndfleet.nodefiles.bootstrap import render_bootstrap
from ndfleet.nodefiles.burnin_node_config import IMPACT_UNIT_TIMEOUT_S
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config


@pytest.mark.parametrize("opted_in", [True, False])
def test_node_json_carries_burnin_and_impact(opted_in: bool) -> None:
    spec = load_spec(base_config(health={"impactReporting": opted_in}), "wiring")
    node = json.loads(render_bootstrap(spec, spec.islands[0]).files["node.json"])
    assert node["impact"]["enabled"] is opted_in
    assert node["burnin"]["pair_busbw_floor_gbps"] == spec.profile.burnin.pair_busbw_gbps
    assert node["burnin"]["island_busbw_floor_gbps"] == spec.profile.burnin.island_busbw_gbps


def test_failed_validation_starts_the_impact_report() -> None:
    spec = load_spec(base_config(), "wiring")
    unit = render_bootstrap(spec, spec.islands[0]).files["ndfleet-validate.service"]
    line = next(x for x in unit.splitlines() if "impact report" in x)
    assert line.startswith("ExecStopPost=/bin/sh -c 'if [ \"$$EXIT_STATUS\" = 1 ]; then systemd-run --no-block")
    assert f"--property=RuntimeMaxSec={IMPACT_UNIT_TIMEOUT_S}" in line
    assert "/opt/ndfleet/bin/ndfleet-node impact report --validator-report /run/ndfleet/report.json" in line


def test_the_slurm_health_check_starts_the_same_impact_report() -> None:
    # Issue 27: a hardware fault found by the health check is reported too, with the validate unit's command line
    # (one home: bootstrap.impact_launch), passed to `slurm-health --impact-launch` as one word.
    import shlex

    from ndfleet.slurm.machines import slurm_node_files

    spec = load_spec(base_config(scheduler="slurm"), "wiring")
    unit = render_bootstrap(spec, spec.islands[0]).files["ndfleet-validate.service"]
    stop_post = next(x for x in unit.splitlines() if "impact report" in x)
    launch = stop_post.split("then ", 1)[1].rsplit("; fi'", 1)[0]
    script = next(f.content for f in slurm_node_files(spec, spec.islands[0])
                  if f.path == "/usr/local/sbin/ndfleet-slurm-health")
    # The periodic pass files the report; the Epilog only marks and exits non-zero (issue 47).
    command = next(ln for ln in script.replace("\\\n", " ").splitlines()
                   if " slurm-health " in ln and "--epilog" not in ln)  # fmt: skip
    words = shlex.split(command)
    assert words[words.index("--impact-launch") + 1] == launch
    # --collect: a report that failed is unloaded, or it would refuse every later start until the next boot.
    assert shlex.split(launch)[:4] == ["systemd-run", "--no-block", "--collect", "--unit=ndfleet-impact"]
