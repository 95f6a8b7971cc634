"""What a reviewer must know first, in `ndfleet diff`: create / update / replace / delete counts (a replacement counted
by the same rules that say "recreated"), the cost change per hour and month, userData decoded into line diffs, and a
stop when the two plans are of different stacks (issue 29, item 4)."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest

from ndfleet.cost.month import HOURS_PER_MONTH
from ndfleet.nodefiles.machinefile import MachineFile
from ndfleet.nodefiles.nodebundle import pack
from ndfleet.plans import plandiff
from ndfleet.plans.plandiff import bundle
from ndfleet.slurm.machines import machine_user_data
from ndfleet.slurm.userdata import compose, decompose
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.test_plandiff import load, resource, vmss_inputs
from tests.test_plandiff_cli import run, write

H100, H200 = "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5"
SLURM_CONF = "/etc/slurm/slurm.conf"


def with_cost(plan: dict[str, Any], usd_per_hour: float, complete: bool = True) -> dict[str, Any]:
    """The plan with a `cost` of the shape ndfleet/cost/estimate.py writes (the keys diff reads)."""
    plan["cost"] = {"currency": "USD", "hoursPerMonth": HOURS_PER_MONTH, "usdPerHour": usd_per_hour,
                    "usdPerMonth": round(usd_per_hour * HOURS_PER_MONTH, 2), "complete": complete}  # fmt: skip
    return plan


def node_bundle(slurm_conf: str) -> str:
    """A compute node's userData as nodebundle.pack writes it (base64 of the xz bundle)."""
    files = [MachineFile.text(SLURM_CONF, 0o644, slurm_conf), MachineFile.text("/etc/ndfleet/node.json", 0o644, "{}")]
    return base64.b64encode(pack(files, [["systemctl", "daemon-reload"]])).decode()


def with_user_data(plan: dict[str, Any], user_data: str) -> dict[str, Any]:
    vmss_inputs(plan)["virtualMachineProfile"]["userData"] = user_data
    return plan


@pytest.fixture
def base() -> dict[str, Any]:
    return load()


@pytest.fixture
def head(base: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(base)


@pytest.fixture(scope="module")
def controller_user_data() -> str:
    """The real controller userData of the dev stack (ndfleet/slurm/machines.py)."""
    stack = load_stack(name="dev")
    return machine_user_data(load_spec(stack.ndfleet_config, stack.name), "controller")


# --- counts


def test_a_vm_size_change_counts_as_a_replacement(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["sku"]["name"] = H200
    diff = plandiff.diff_plans(base, head)
    assert (diff.count("update"), diff.count("replace")) == (0, 1)
    assert "0 to create, 0 to update, 1 to replace, 0 to delete" in plandiff.render_text([diff])


def test_replacements_are_counted_where_a_consequence_says_recreated(
    base: dict[str, Any], head: dict[str, Any]
) -> None:
    vmss_inputs(head)["sku"]["name"] = H200
    vmss_inputs(head)["upgradePolicy"]["mode"] = "Automatic"
    resource(head, plandiff.STORAGE_ACCOUNT_TYPE)["inputs"]["kind"] = "BlobStorage"
    diff = plandiff.diff_plans(base, head)
    recreated = {(c.resource_type, c.resource_name) for c in diff.consequences
                 if c.rule in ("island-replaced", "data-replaced")}  # fmt: skip
    assert recreated == set(diff.replaced) and diff.count("replace") == 2


def test_an_in_place_change_stays_an_update(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["sku"]["capacity"] = 3
    diff = plandiff.diff_plans(base, head)
    assert (diff.count("update"), diff.count("replace")) == (1, 0)


def test_a_replacement_is_marked_in_the_resource_list(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["sku"]["name"] = H200
    text = plandiff.render_text([plandiff.diff_plans(base, head)])
    assert "  +- azure-native:compute:VirtualMachineScaleSet dev-ib00" in text


# --- cost


def test_the_cost_change_is_shown_per_hour_and_month(base: dict[str, Any], head: dict[str, Any]) -> None:
    line = plandiff.render_text([plandiff.diff_plans(with_cost(base, 100.0), with_cost(head, 250.5))]).splitlines()[1]
    assert line == (f"  [dev] cost (VMs, list price): US$100.00 -> US$250.50 per hour (+US$150.50), US$73,000.00 -> "
                    f"US$182,865.00 per {HOURS_PER_MONTH}-hour month (+US$109,865.00)")


def test_a_cost_decrease_is_negative(base: dict[str, Any], head: dict[str, Any]) -> None:
    text = plandiff.render_text([plandiff.diff_plans(with_cost(base, 300.0), with_cost(head, 100.0))])
    assert "(-US$200.00)" in text


def test_an_incomplete_cost_gives_no_change(base: dict[str, Any], head: dict[str, Any]) -> None:
    text = plandiff.render_text([plandiff.diff_plans(with_cost(base, 100.0), with_cost(head, 50.0, False))])
    assert ("cost (VMs, list price): US$100.00 -> US$50.00 (priced VMs only) per hour; incomplete: a VM size has no "
            "list price in the region, so no change is given") in text


def test_a_cost_without_any_price_is_unknown_not_zero(base: dict[str, Any], head: dict[str, Any]) -> None:
    text = plandiff.render_text([plandiff.diff_plans(with_cost(base, 100.0), with_cost(head, 0.0, False))])
    assert "US$100.00 -> unknown per hour" in text and "US$0" not in text


def test_a_null_cost_is_unknown(base: dict[str, Any], head: dict[str, Any]) -> None:
    unknown = with_cost(head, 0.0, False)
    unknown["cost"].update(usdPerHour=None, usdPerMonth=None)  # what a plan with nothing priced now says
    plandiff.validate_plan(unknown)
    text = plandiff.render_text([plandiff.diff_plans(with_cost(base, 100.0), unknown)])
    assert "US$100.00 -> unknown per hour" in text and "US$0" not in text


def test_the_month_is_the_plans_own_not_the_rounded_hour_times_730(capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 44: for dev, `plan` said US$144,107.84 a month and `diff` 144,109.30 (the rounded 197.41 x 730).
    from ndfleet.cli import main
    from ndfleet.cost.estimate import estimate_cost
    from ndfleet.cost.money import usd
    from ndfleet.plans.build import run_plan

    plan = run_plan(load_stack(name="dev"))
    month = estimate_cost(plan.spec).usd_per_month
    assert month is not None and round(month, 2) != round(round(month / HOURS_PER_MONTH, 2) * HOURS_PER_MONTH, 2)
    doc = plan.as_json()
    bigger = copy.deepcopy(doc)
    bigger["cost"]["usdPerHour"] *= 2
    bigger["cost"]["usdPerMonth"] *= 2
    line = plandiff.render_text([plandiff.diff_plans(doc, bigger)]).splitlines()[1]
    assert f"{usd(month)} -> {usd(2 * round(month, 2))} per {HOURS_PER_MONTH}-hour month" in line
    assert main(["cost", "--stack", "dev"]) == 0
    assert f"{usd(month)} per {HOURS_PER_MONTH}-hour month" in capsys.readouterr().out


def test_a_plan_without_cost_is_named_not_guessed(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["sku"]["capacity"] = 3
    text = plandiff.render_text([plandiff.diff_plans(with_cost(base, 100.0), head)])
    assert "cost: not compared: the head plan carries no cost" in text


def test_the_cost_leads_the_markdown_comment(base: dict[str, Any], head: dict[str, Any]) -> None:
    md = plandiff.render_markdown([plandiff.diff_plans(with_cost(base, 100.0), with_cost(head, 200.0))])
    assert md.index("- dev: cost (VMs, list price): US$100.00 -> US$200.00 per hour") < md.index("### Stack")


def test_a_cost_that_is_not_a_number_is_refused(base: dict[str, Any]) -> None:
    plan = with_cost(base, 1.0)
    plan["cost"]["usdPerHour"] = "1.0"
    with pytest.raises(plandiff.PlanFormatError, match=r"cost.usdPerHour: must be a number"):
        plandiff.validate_plan(plan)


# --- userData


def test_a_node_bundle_change_is_a_line_diff(base: dict[str, Any], head: dict[str, Any]) -> None:
    with_user_data(base, node_bundle("ClusterName=dev\nMaxNodeCount=10\n"))
    with_user_data(head, node_bundle("ClusterName=dev\nMaxNodeCount=12\n"))
    text = plandiff.render_text([plandiff.diff_plans(base, head)])
    assert "        -MaxNodeCount=10\n        +MaxNodeCount=12\n" in text
    assert f"--- base{SLURM_CONF}" in text and "ClusterName" not in text


def test_a_slurm_machine_user_data_change_is_a_line_diff(controller_user_data: str) -> None:
    library, doc = decompose(controller_user_data)  # the controller's library bundle, then its configuration
    old = doc["files"][SLURM_CONF]
    doc["files"][SLURM_CONF] = old.replace("MaxNodeCount=", "MaxNodeCount=1")
    edited = compose(doc, library)
    lines = bundle.bundle_diff(controller_user_data, edited)
    assert lines[:2] == [f"--- base{SLURM_CONF}", f"+++ head{SLURM_CONF}"]
    assert [line[:14] for line in lines[3:]] == ["-MaxNodeCount=", "+MaxNodeCount="]


def test_the_user_data_consequence_names_the_changed_files(base: dict[str, Any], head: dict[str, Any]) -> None:
    with_user_data(base, node_bundle("MaxNodeCount=10\n"))
    with_user_data(head, node_bundle("MaxNodeCount=12\n"))
    (model,) = [c for c in plandiff.diff_plans(base, head).consequences if c.rule == "vmss-model"]
    assert model.message.startswith(f"virtualMachineProfile.userData: node bundle: 1 file change ({SLURM_CONF})")


def test_the_user_data_diff_reaches_the_markdown_details(base: dict[str, Any], head: dict[str, Any]) -> None:
    with_user_data(base, node_bundle("MaxNodeCount=10\n"))
    with_user_data(head, node_bundle("MaxNodeCount=12\n"))
    md = plandiff.render_markdown([plandiff.diff_plans(base, head)])
    assert "Node bundle changes (decoded userData or Key Vault parts):" in md and "+MaxNodeCount=12" in md


def test_user_data_lines_are_terminal_safe(base: dict[str, Any], head: dict[str, Any]) -> None:
    with_user_data(base, node_bundle("a=1\n"))
    with_user_data(head, node_bundle("a=\x1b[2J\x1b]0;owned\x07" + "x" * 5000 + "\n"))
    lines = bundle.bundle_diff(vmss_inputs(base)["virtualMachineProfile"]["userData"],
                               vmss_inputs(head)["virtualMachineProfile"]["userData"])  # fmt: skip
    added = next(line for line in lines if line.startswith("+a="))
    assert "\x1b" not in added and "\x07" not in added and len(added) == bundle.MAX_LINE_CHARS


def test_a_long_user_data_diff_is_cut_and_says_how_much(base: dict[str, Any], head: dict[str, Any]) -> None:
    many = bundle.MAX_DIFF_LINES + 50
    with_user_data(base, node_bundle(""))
    with_user_data(head, node_bundle("".join(f"line{i}\n" for i in range(many))))
    lines = bundle.bundle_diff(vmss_inputs(base)["virtualMachineProfile"]["userData"],
                               vmss_inputs(head)["virtualMachineProfile"]["userData"])  # fmt: skip
    assert len(lines) == bundle.MAX_DIFF_LINES + 1
    assert lines[-1].startswith(f"... {many + 3 - bundle.MAX_DIFF_LINES} more lines")


def test_user_data_that_is_no_bundle_stays_a_hash(base: dict[str, Any], head: dict[str, Any]) -> None:
    with_user_data(base, base64.b64encode(b"x" * 300).decode())
    with_user_data(head, base64.b64encode(b"y" * 300).decode())
    text = plandiff.render_text([plandiff.diff_plans(base, head)])
    assert "files decoded" not in text and "sha256" in text and "--- base" not in text


# --- plans of different stacks


def test_plans_of_two_stacks_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = load()
    other["stack"] = "prod"
    code, out, err = run(capsys, str(write(tmp_path / "a.json", load())), str(write(tmp_path / "b.json", other)))
    assert code == 2 and out == ""
    assert f"{tmp_path}/a.json is a plan of stack 'dev' and {tmp_path}/b.json of stack 'prod'" in err
    assert "--allow-different-stacks" in err


def test_plans_of_two_stacks_diff_when_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = load()
    other["stack"] = "prod"
    code, out, _ = run(capsys, str(write(tmp_path / "a.json", load())), str(write(tmp_path / "b.json", other)),
                       "--allow-different-stacks")  # fmt: skip
    assert code == 0 and out.startswith("1 stack (dev -> prod: no changes)")


def test_folders_with_a_stack_file_of_another_stack_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = load()
    other["stack"] = "prod"
    (tmp_path / "base").mkdir()
    (tmp_path / "head").mkdir()
    write(tmp_path / "base" / "dev.json", load())
    write(tmp_path / "head" / "dev.json", other)
    code, _, err = run(capsys, "--base-dir", str(tmp_path / "base"), "--head-dir", str(tmp_path / "head"))
    assert code == 2 and "of stack 'prod'" in err


def test_a_user_data_bomb_is_not_decoded(base: dict[str, Any], head: dict[str, Any]) -> None:
    """xz of 5 MiB of zeros (a few hundred bytes): decompressing stops at nodebundle's bound and it stays a hash."""
    import lzma

    def bomb_of(mib: int) -> str:
        return base64.b64encode(lzma.compress(b"\0" * (mib << 20), format=lzma.FORMAT_XZ)).decode()

    bomb = bomb_of(5)
    with_user_data(base, bomb_of(6))
    with_user_data(head, bomb)
    assert bundle.decode_bundle(bomb) is None
    text = plandiff.render_text([plandiff.diff_plans(base, head)])
    assert "--- base" not in text and "sha256" in text
