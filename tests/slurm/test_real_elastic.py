"""A real slurmctld (Debian's 22.05) with ndfleet's slurm.conf for an elastic island (docs/elastic.md): it accepts
the power-saving settings, lists the CLOUD nodes powered down, and runs the ResumeProgram with the job's nodes and
SLURM_RESUME_FILE when a job needs them; what the resume program does to Slurm (drain, requeuehold, NodeHostname)
is accepted. The ResumeProgram here is a recorder that runs those same scontrol calls; the real programs, the VMs and
their boot are the twin's (tests/twin/test_elastic.py).

ndfleet installs Slurm 25.11, which lists powered-down CLOUD nodes and takes a CLOUD node's address from its
registration by default; 22.05 does either only with `PrivateData=cloud` and `cloud_reg_addrs`. The rendered
slurm.conf has neither: the sandbox adds them for a Slurm older than the release that made them the default
(tests/slurm/sandbox.py, with_older_release_equivalents), so these tests check 25.11's behaviour, not a 22.05
workaround. Without them, 22.05 answers "Node gpu-3 not found" for a powered-down node.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from ndfleet.slurm.conf import slurm_site
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config
from tests.slurm.sandbox import SANDBOX_TOOLS, SlurmSandbox, wait_for
from tests.system_tools import require_tools

ISLAND = "gpu"
# What the recorder does, as ndfleet's resume program does it: drain awaiting burn-in (22.05 requeues a job allocated
# to a node being powered up when it is drained), hold each job of the resume file, and later tell Slurm the VM's
# host name. Each call's exit status is recorded.
RECORDER = """#!/bin/sh
out={out}
cp "$SLURM_RESUME_FILE" "$out/resume-file.json"
echo "$1" > "$out/resume-nodes"
/usr/bin/scontrol update NodeName="$1" State=DRAIN Reason=ndfleet:burnin:awaiting; echo $? > "$out/drain.rc"
jobs=$(/usr/bin/python3 -c 'import json,sys; print(*[j["job_id"] for j in json.load(sys.stdin)["jobs"]])' \\
    < "$SLURM_RESUME_FILE")
for job in $jobs; do
  /usr/bin/scontrol hold "$job" > "$out/hold.out" 2>&1; echo $? > "$out/hold.rc"
done
# A VM is listed tens of seconds after the capacity was raised: only then is its host name recorded.
sleep 15
/usr/bin/scontrol update NodeName={node} NodeHostname=twin-vm-00000a > "$out/hostname.out" 2>&1
echo $? > "$out/hostname.rc"
touch "$out/done"
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmSandbox]:
    require_tools(*SANDBOX_TOOLS)  # skipped with the summary line when missing; a failure under CI
    spec = load_spec(
        base_config(scheduler="slurm", nodes=None, islands=[
            # 2: Slurm's fewest; the sandbox starts one slurmd of it (a fixed island's size is not in slurm.conf).
            {"name": "ib00", "nodes": 2},
            {"name": ISLAND, "elastic": {"maxNodes": 3, "idleMinutes": 1, "resumeTimeoutMinutes": 5}},
        ]),
        "t",
    )  # fmt: skip
    root = Path(tmp_path_factory.mktemp("slurm-elastic", numbered=True))
    short = Path("/tmp") / f"ndfe-{os.getpid()}"
    short.symlink_to(root)
    recorded = short / "recorded"
    recorded.mkdir()
    recorded.chmod(0o777)
    recorder = short / "resume-recorder"
    recorder.write_text(RECORDER.format(out=recorded, node=f"{ISLAND}-1"))
    recorder.chmod(0o755)
    site = replace(slurm_site(spec), resume_program=str(recorder), suspend_program="/bin/true",
                   resume_fail_program="/bin/true")  # fmt: skip
    sandbox = SlurmSandbox(short, site, {})
    try:
        sandbox.start()
        sandbox.start_munge()
        sandbox.start_slurmctld()
        yield sandbox
    except Exception:
        print(sandbox.logs())
        raise
    finally:
        sandbox.stop()
        short.unlink()


def test_the_elastic_nodes_are_listed_powered_down_in_the_cloud(cluster: SlurmSandbox) -> None:
    line = cluster.node_line(f"{ISLAND}-3")
    assert "CLOUD" in line and "POWERED_DOWN" in line and "AvailableFeatures=island-gpu" in line, line


@pytest.fixture(scope="module")
def resumed(cluster: SlurmSandbox) -> tuple[str, Path]:
    """A 2-node job on the empty elastic island, and the recorder's folder once the resume program has run."""
    job = cluster.sbatch("-N", "2", "-p", ISLAND, "--wrap", "hostname").stdout.strip()
    recorded = cluster.root / "recorded"
    wait_for("the resume program", (recorded / "done").exists, timeout_s=120)
    return job, recorded


def _status(recorded: Path, call: str) -> tuple[str, str]:
    out = recorded / f"{call}.out"
    return (recorded / f"{call}.rc").read_text().strip(), out.read_text() if out.exists() else ""


def test_a_job_needing_powered_down_nodes_runs_the_resume_program_with_them(
    resumed: tuple[str, Path],
) -> None:
    _, recorded = resumed
    assert (recorded / "resume-nodes").read_text().strip() == f"{ISLAND}-[1-2]"


def test_the_resume_file_names_the_job_and_its_nodes(resumed: tuple[str, Path]) -> None:
    job, recorded = resumed
    jobs = json.loads((recorded / "resume-file.json").read_text())["jobs"]
    assert [(str(j["job_id"]), j.get("nodes_resume") or j.get("nodes")) for j in jobs] == [(job, f"{ISLAND}-[1-2]")]


def test_draining_the_resumed_nodes_requeues_the_job_and_a_hold_keeps_it_pending(
    cluster: SlurmSandbox, resumed: tuple[str, Path]
) -> None:
    job, recorded = resumed
    assert _status(recorded, "drain") == ("0", "")
    assert _status(recorded, "hold")[0] == "0", _status(recorded, "hold")
    state = cluster.job(job)
    assert (state.get("JobState"), state.get("Reason")) == ("PENDING", "JobHeldAdmin"), state


def test_a_resumed_node_takes_the_vms_host_name(cluster: SlurmSandbox, resumed: tuple[str, Path]) -> None:
    _, recorded = resumed
    assert _status(recorded, "hostname")[0] == "0", _status(recorded, "hostname")
    assert "NodeHostName=twin-vm-00000a " in cluster.node_line(f"{ISLAND}-1")


def test_an_elastic_node_has_every_core_of_its_vm_size(cluster: SlurmSandbox) -> None:
    # The CLOUD line declares the size's shape (ND96isr H100 v5: 2 sockets x 48 cores, 1 thread each); without it
    # slurmctld takes the node as 1 CPU (slurm.conf(5): CPUs defaults to the product of sockets, cores and threads).
    line = cluster.node_line(f"{ISLAND}-3")
    assert "CPUTot=96 " in line and "Sockets=2 " in line and "CoresPerSocket=48 " in line, line
    assert "ThreadsPerCore=1 " in line, line

