"""What `ndfleet plan` warns about, and that each warning is printed once (the table, or stderr beside JSON)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.derive import EXAMPLE_KEY_WARNING
from ndfleet.stackconfig.stackfile import load_stack
from tests.conftest import EXAMPLE_STACKS, REPO, base_config

NDFLEET = Path(sys.prefix) / "bin" / "ndfleet"
LATEST_IMAGE = "ndfleet:image = 'microsoft-dsvm:ubuntu-hpc:2204:latest': Azure resolves 'latest'"
SLURM_WITHOUT_BASTION = "ndfleet:scheduler = 'slurm' with ndfleet:bastion off: the login node has no public address"


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_example_key_and_latest_image_warnings_are_printed_once(fmt: str) -> None:
    proc = subprocess.run([str(NDFLEET), "plan", "--stack", "dev", "--format", fmt], cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # JSON carries the warnings as data (docs/plan-json.md); what is printed for a person is the table or stderr.
    printed = proc.stdout + proc.stderr if fmt == "table" else proc.stderr
    assert printed.count(EXAMPLE_KEY_WARNING) == 1
    assert printed.count(LATEST_IMAGE) == 1  # dev keeps the default image, `latest`


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


def test_latest_image_warns_what_a_repair_or_scale_out_may_boot() -> None:
    spec = load_spec(base_config(), "t")  # the default image is ...:latest
    assert [w for w in spec.warnings if w.startswith(LATEST_IMAGE)] == [
        LATEST_IMAGE + " each time it creates or reimages a VM, so each repair or scale-out may boot a newer image "
        "(GPU driver, OFED, NCCL) than the rest of its island; pin a version, image: "
        "microsoft-dsvm:ubuntu-hpc:2204:<version> (the versions: az vm image list --publisher microsoft-dsvm "
        "--offer ubuntu-hpc --sku 2204 --all --output table)"
    ]


@pytest.mark.parametrize("version", ["latest", "Latest", "LATEST"])
def test_latest_is_recognised_whatever_its_case(version: str) -> None:
    spec = load_spec(base_config(image=f"microsoft-dsvm:ubuntu-hpc:2204:{version}"), "t")
    assert sum("Azure resolves 'latest'" in w for w in spec.warnings) == 1


def test_a_pinned_image_gives_no_image_warning() -> None:
    spec = load_spec(base_config(image="microsoft-dsvm:ubuntu-hpc:2204:22.04.2024102301"), "t")
    assert not any(w.startswith("ndfleet:image") for w in spec.warnings)


def test_a_broken_image_setting_is_an_error_not_a_latest_warning() -> None:
    from ndfleet.stackconfig.problems import SpecError

    with pytest.raises(SpecError) as info:
        load_spec(base_config(image="ubuntu-hpc"), "t")
    assert "Azure resolves 'latest'" not in str(info.value)


def test_the_example_stacks_that_pin_their_image_plan_without_the_warning() -> None:
    pinned = {}
    for name in EXAMPLE_STACKS:
        stack = load_stack(name=name)
        spec = load_spec(stack.ndfleet_config, name)
        pinned[name] = (spec.image.pinned, any(w.startswith("ndfleet:image") for w in spec.warnings))
    assert pinned["prod"] == pinned["h200"] == (True, False)
    assert pinned["dev"] == (False, True)  # dev keeps the default, `latest`, and shows the warning



# --- monitoring: the Azure Monitor workspace's default limits (ndfleet/monitoring/budget.py) --------------------------

SERIES_OVER = "ndfleet:monitoring.enabled with "
SAMPLES_OVER = "ndfleet:monitoring.scrapeIntervalSeconds = "
REMEDIES = ("ask Azure support to raise the workspace's limit", "split the cluster over more stacks",
            "send fewer series (docs/monitoring.md, series budget)")  # fmt: skip


def monitored(nodes: int, scrape_interval_s: int) -> dict[str, object]:
    """A Slurm stack of `nodes` GPU nodes in islands of 100 with monitoring on."""
    islands = [{"name": f"ib{n:02d}", "nodes": min(100, nodes - 100 * n)} for n in range((nodes + 99) // 100)]
    config = base_config(
        islands=islands, scheduler="slurm", bastion=True, plannedNodes=nodes,
        monitoring={"enabled": True, "emails": ["oncall@example.com"], "scrapeIntervalSeconds": scrape_interval_s},
    )  # fmt: skip
    del config["nodes"]
    return config


def workspace_warnings(spec_warnings: tuple[str, ...]) -> list[str]:
    return [w for w in spec_warnings if w.startswith((SERIES_OVER, SAMPLES_OVER))]


def planned_spec(config: dict[str, object]) -> ClusterSpec:
    """The spec as `ndfleet plan` and the program's prepare step hold it, the series budget's warnings added."""
    from ndfleet.monitoring.budget import with_workspace_warnings

    return with_workspace_warnings(load_spec(config, "t"))


def test_a_stack_within_the_workspace_limits_gets_no_warning() -> None:
    from ndfleet.monitoring.budget import WORKSPACE_ACTIVE_SERIES_LIMIT, budget

    spec = planned_spec(monitored(256, 30))
    assert budget(spec).series < WORKSPACE_ACTIVE_SERIES_LIMIT / 2  # far within: the test is about the check
    assert workspace_warnings(spec.warnings) == []


def test_a_stack_over_the_active_series_limit_is_warned_with_what_to_do() -> None:
    from ndfleet.monitoring.budget import WORKSPACE_ACTIVE_SERIES_LIMIT, budget

    spec = planned_spec(monitored(2_000, 120))  # 120 s: few samples per minute, many series
    b = budget(spec)
    assert b.series > WORKSPACE_ACTIVE_SERIES_LIMIT > b.events_per_minute
    (warning,) = workspace_warnings(spec.warnings)
    assert warning.startswith(
        f"{SERIES_OVER}2,000 nodes: about {b.series:,} active series ({b.series_per_node:,} per node), more than the "
        f"1,000,000 an Azure Monitor workspace takes by default (it holds about {b.max_nodes:,} nodes)"
    )
    assert b.max_nodes < 2_000
    assert all(remedy in warning for remedy in REMEDIES)


def test_a_stack_over_the_samples_per_minute_limit_is_told_to_scrape_less_often() -> None:
    from ndfleet.monitoring.budget import WORKSPACE_EVENTS_PER_MINUTE_LIMIT, budget

    spec = planned_spec(monitored(1_000, 30))
    b = budget(spec)
    assert b.events_per_minute > WORKSPACE_EVENTS_PER_MINUTE_LIMIT > b.series
    (warning,) = workspace_warnings(spec.warnings)
    assert warning.startswith(
        f"{SAMPLES_OVER}30 with 1,000 nodes: about {b.events_per_minute:,.0f} samples per minute, more than the "
        "1,000,000 an Azure Monitor workspace ingests per minute by default; Azure throttles the rest: scrape less "
        "often (scrapeIntervalSeconds: 60 halves it)"
    )
    assert all(remedy in warning for remedy in REMEDIES)


def test_monitoring_off_is_never_warned_about_the_workspace() -> None:
    config = monitored(2_000, 30)
    config["monitoring"] = {"enabled": False}
    assert workspace_warnings(planned_spec(config).warnings) == []


def test_the_plan_table_shows_the_series_and_prints_the_warning_once() -> None:
    from ndfleet.commands.plan import render_table
    from ndfleet.monitoring.budget import budget
    from tests.conftest import plan_of

    plan = plan_of(monitored(1_000, 30))
    table = render_table(plan)
    b = budget(plan.spec)
    assert f"  monitoring: about {b.series:,} active series ({b.series_per_node:,} per node)" in table
    assert table.count(SAMPLES_OVER) == 1


def test_the_program_logs_the_workspace_warning_before_deploying() -> None:
    """`pulumi up` runs the prepare step, whose spec carries the warning the program logs (ndfleet/program.py)."""
    from ndfleet.prepare import prepare

    prepared = prepare(load_spec(monitored(1_000, 30), "t"))
    assert len(workspace_warnings(prepared.spec.warnings)) == 1


def test_a_stack_without_bastion_says_how_its_nodes_are_reached() -> None:
    """No machine of a stack has a public address: without Bastion (the h200 example) the plan says so, and how."""
    from ndfleet.stackconfig.config import load_spec
    from tests.conftest import base_config

    lone = [w for w in load_spec(base_config(), "t").warnings if w.startswith("ndfleet:bastion off")]
    assert lone == [
        "ndfleet:bastion off: the nodes have no public address, so they are reachable only from inside the VNet (a VM "
        "there, a peered network or a VPN gateway), not from a laptop on the internet; set ndfleet:bastion: true to "
        "reach them through Azure Bastion (docs/deploying.md, \"Reaching a node\")"
    ]
    assert not [w for w in load_spec(base_config(bastion=True), "t").warnings if "bastion" in w]
