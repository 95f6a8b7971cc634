"""The elastic programs under hostile node lists and Slurm answers (issue 31): resume-fail acts on the nodes of its
own elastic islands only, never `NodeName=` alone; a node has one spelling; the capacity never passes maxNodes; a job
held at resume is released when its nodes cannot be read.

resume-fail runs through its real entry point (`python3 -m ndfleet_node.elastic.programs`' main) with a fake
`scontrol`; the resume cases drive `resume` with the Resource Manager stand-in of test_elastic.py and, where the
answer's size matters, the real scontrol client over a fake `scontrol` script. The `world` fixture (a Context over
the stand-in and a recording scontrol) is test_elastic.py's, through tests/node/conftest.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node.elastic.programs import main, resume
from ndfleet_node.elastic.state import NodeEntry, island_and_index, island_state
from ndfleet_node.scontrol import MAX_CALL_BYTES, Scontrol

from tests.impact.arm_server import loopback_up

# A fake scontrol (Slurm's documented forms: `show hostnames LIST` prints one name a line, `show node --oneliner`
# one node a line, `update`/`hold`/`release` print nothing on success; https://slurm.schedmd.com/scontrol.html).
# Every call is logged as a JSON list; `show hostnames flood` answers more than the client's cap.
FAKE = """#!{python}
import json, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:2] == ["show", "hostnames"]:
    if args[2] == "flood":
        sys.stdout.write("gpu-1\\n" * ({cap} // 6 + 10))
    else:
        print("\\n".join(n for n in args[2].split(",") if n))
"""


def fake_scontrol(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "scontrol.log"
    script = tmp_path / "scontrol"
    script.write_text(FAKE.format(python=sys.executable, log=str(log), cap=MAX_CALL_BYTES))
    script.chmod(0o755)
    return script, log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def run_resume_fail(tmp_path: Path, hostlist: str) -> list[list[str]]:
    loopback_up()
    script, log = fake_scontrol(tmp_path)
    config = tmp_path / "elastic.json"
    config.write_text(json.dumps({
        "islands": {"gpu": {"scaleSet": "dev-gpu-vmss", "minNodes": 0, "maxNodes": 4}},
        "state_dir": str(tmp_path / "state"), "scontrol": [str(script)], "scontrol_timeout_s": 20,
        # No instance metadata here: the programs' Azure side fails at once, and they go on with Slurm's side.
        "imds_endpoint": "http://127.0.0.1:9",
    }))  # fmt: skip
    assert main(["--config", str(config), "resume-fail", hostlist]) == 1
    return [c for c in calls(log) if c[:1] == ["update"]]


def test_resume_fail_powers_down_only_the_nodes_of_its_elastic_islands(tmp_path: Path) -> None:
    # Slurm's ResumeFailProgram list may name a fixed island's node, the controller, a login node.
    updates = run_resume_fail(tmp_path, "gpu-2,prod-ib00-000004,ctl-0,login-1,gpu-9,gpu-02,gpu-2")
    assert [u[1] for u in updates] == ["NodeName=gpu-2"]


def test_resume_fail_of_no_elastic_node_sends_no_update(tmp_path: Path) -> None:
    assert run_resume_fail(tmp_path, "prod-ib00-000004,ctl-0,login-1") == []


@pytest.mark.parametrize("name", ["gpu-01", "gpu-001", "gpu-0", "gpu-+1", "gpu-\u0661", "gpu-\u00b2", "gpu-1 "])
def test_a_name_not_spelled_the_canonical_way_is_no_node(name: str) -> None:
    assert island_and_index(name) is None


def test_one_node_under_three_spellings_is_one_node_and_a_foreign_digit_is_refused(world: Any) -> None:
    ctx, fake, _ = world
    assert resume(ctx, ["gpu-1", "gpu-01", "gpu-001", "gpu-\u00b2", "gpu-\u0661"], None) == 1
    assert fake.capacity == 1
    refused = [p for p in ctx.problems if "not a node of an elastic island" in p]
    assert [p.split()[0] for p in refused] == ["gpu-01", "gpu-001", "gpu-\u00b2", "gpu-\u0661"]


def test_the_capacity_asked_for_never_passes_max_nodes(world: Any) -> None:
    ctx, fake, _ = world
    # State left by an older release (or by hand) with more pending nodes than the island may have.
    with island_state(ctx.settings.state_dir, "gpu") as state:
        state.nodes = {f"gpu-{n:02d}": NodeEntry(pending_since=1.0) for n in range(1, 12)}
    ctx.settings = type(ctx.settings)(**{**ctx.settings.__dict__, "claim_wait_s": 0})
    resume(ctx, ["gpu-1"], None)
    assert fake.capacity == 4
    assert all(r[2]["sku"]["capacity"] <= 4 for r in fake.requests if r[0] == "PATCH")


def test_a_held_job_is_released_when_its_nodes_cannot_be_read(world: Any, tmp_path: Path) -> None:
    ctx, _, scontrol = world
    scontrol.refuse.add("show")  # `scontrol show hostnames` fails
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(json.dumps({"jobs": [{"job_id": 42, "nodes_resume": "gpu-[1-2]"}]}))
    assert resume(ctx, ["gpu-1", "gpu-2"], str(resume_file)) == 1
    assert ("hold", "42") in scontrol.calls and ("release", "42") in scontrol.calls


def test_a_held_job_is_released_when_its_node_list_is_too_long(world: Any, tmp_path: Path) -> None:
    ctx, _, _ = world
    script, log = fake_scontrol(tmp_path)
    ctx.scontrol = Scontrol([str(script)], 20)
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(json.dumps({"jobs": [{"job_id": 43, "nodes_resume": "flood"}]}))
    assert resume(ctx, ["gpu-1"], str(resume_file)) == 1
    assert ["release", "43"] in calls(log)
    assert any("more than" in p for p in ctx.problems)


def test_a_hold_whose_answer_was_lost_is_undone(world: Any, tmp_path: Path) -> None:
    ctx, _, scontrol = world
    scontrol.refuse.update({"hold", "requeuehold"})  # e.g. timed out: the job may be held all the same
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(json.dumps({"jobs": [{"job_id": 45, "nodes_resume": "gpu-1"}]}))
    assert resume(ctx, ["gpu-1"], str(resume_file)) == 1
    assert ("release", "45") in scontrol.calls


def test_a_job_whose_release_fails_too_stays_on_record_for_reconcile(world: Any, tmp_path: Path) -> None:
    ctx, _, scontrol = world
    scontrol.refuse.update({"show", "release"})
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(json.dumps({"jobs": [{"job_id": 44, "nodes_resume": "gpu-[1-2]"}]}))
    resume(ctx, ["gpu-1", "gpu-2"], str(resume_file))
    with island_state(ctx.settings.state_dir, "gpu") as state:
        assert state.held_jobs == {"44": ["gpu-1", "gpu-2"]}
