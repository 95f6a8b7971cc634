"""An island rolled to its scale set's new model by the roll engine on the controller (issue 42, docs/upgrades.md),
beside a running job, through the Resource Manager stand-in's rolling-upgrade calls (tests/twin/arm.py):

1. a deployment changes the island's model: the stack's `health.dcgmLevel` 1 -> 2 (an operator raising the DCGM
   diagnostic level, one of the settings issue 42 names: "a threshold"). It changes the node bundle (its
   `/etc/ndfleet/node.json`, which the node shows), so the bundle's Key Vault slots get new versions, the scale set's
   customData, its boot version (the scale set's tag, the nodes' Slurm feature) and the Application Health
   extension's grace period: a whole new model, as a new ndfleet release would be, with a change the node shows;
2. `ndfleet-roll start --batch 1 --min-available 1` on the controller, then its passes: each node drained with the
   roll's reason, its job waited for, `manualupgrade` then `reimage` of its instance with the controller's own
   managed identity (the roll's role at the island's scale set), each waited for through its Azure-AsyncOperation;
3. each node comes back under its name, validates, registers again, is handed to the burn-in by its health check
   (slurmctld keeps the roll's drain across the new registration: slurm_health.act), is burned in and resumed, and
   the roll ends done.

Its place in the run (tests/twin/conftest.py, RUN_IN_THE_GRACE_WAIT): among the last tests, just before the test of
the node that failed validation, which waits for the extension's 40-minute grace period from that node's boot: the
roll's minutes are spent inside that wait (docs/twin.md).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time

import pytest
from ndfleet_node.names import BOOT_VERSION_FEATURE_PREFIX

from ndfleet.slurm.roll import ROLL_PROGRAM, ROLL_STATE_DIR
from tests.twin.arm import API_VERSION
from tests.twin.conftest import STACK_FILE
from tests.twin.test_boot import BOOT_TIMEOUT_S
from tests.twin.test_cluster import controller, login, nodes_by_name, slurm_up  # noqa: F401 - slurm_up: a fixture
from tests.twin.twin import Twin

ISLAND = "ib01"
# The setting the new model changes, and its value before and after (the twin's stack leaves it at its default, 1).
CHANGED_SETTING = ("    validationLevel: full\n", "    validationLevel: full\n    dcgmLevel: 2\n")
DCGM_BEFORE, DCGM_AFTER = 1, 2
ROLL_TIMEOUT_S = 1800  # two nodes, each: drain, reimage, boot, validation, burn-in (a few minutes here)
JOB_S = 150  # the other node's job: longer than drain, upgrade, reimage and registration (about 60 s here)

@pytest.fixture(scope="module")
def new_model(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The plan of the twin's stack with the changed setting: the deployment the roll brings the island to."""
    text = STACK_FILE.read_text()
    assert text.count(CHANGED_SETTING[0]) == 1, f"{STACK_FILE}: the setting to change is not there once"
    folder = tmp_path_factory.mktemp("rolled-stack")
    stack = folder / STACK_FILE.name  # the same stack name, so the same resource names
    stack.write_text(text.replace(*CHANGED_SETTING))
    cp = subprocess.run([sys.executable, "-m", "ndfleet.cli", "plan", "--stack-file", str(stack), "--format", "json"],
                        capture_output=True, text=True, timeout=600)  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    return dict(json.loads(cp.stdout))


def scale_set_of(twin: Twin) -> str:
    return next(name for name, t in twin.plan.fixed_scale_sets.items() if t.island == ISLAND)


def in_service(fields: dict[str, str]) -> bool:
    flags = set(fields.get("State", "").split("+"))
    return bool(flags & {"IDLE", "ALLOCATED", "MIXED"}) and not flags & {"DRAIN", "DOWN", "NOT_RESPONDING"}


def idle_in_service(twin: Twin) -> list[str]:
    nodes = nodes_by_name(controller(twin))
    names = {tm.name for tm in twin.role("compute") if tm.spec.island == ISLAND}
    return sorted(n for n in names if n in nodes and in_service(nodes[n]) and "IDLE" in nodes[n]["State"])


def scale_set_path(twin: Twin, scale_set: str, action: str) -> str:
    assert twin.arm is not None
    return f"{twin.arm.scale_sets[scale_set].resource_id}/{action}?api-version={API_VERSION}"


def dcgm_level(twin: Twin, node: str) -> int:
    doc = json.loads(twin.machine(node).run("cat /etc/ndfleet/node.json").stdout)
    return int(doc["validation"]["dcgm_level"])


def boot_features(fields: dict[str, str]) -> set[str]:
    return {f for f in fields.get("AvailableFeatures", "").split(",") if f.startswith(BOOT_VERSION_FEATURE_PREFIX)}


def deploy(twin: Twin, scale_set: str, plan: dict) -> None:
    """The deployment of the new model for the island: the bundle's slots written (new Key Vault versions; the old
    stay, which nodes on the old model read), then the scale set's PUT (pulumi-azure-native's full body)."""
    from tests.twin.plan import VMSS, put_body

    assert twin.arm is not None
    for r in plan["resources"]:
        props = r["inputs"].get("properties")  # a Pulumi secret's value is not the plan's to know (a string)
        secret = r["type"] == "azure-native:keyvault:Secret" and isinstance(props, dict)
        if secret and isinstance(v := props.get("value"), str):
            name = str(r["inputs"]["secretName"])
            if name in twin.state.secrets:
                twin.state.set_secret(name, v)
    ss = next(r for r in plan["resources"] if r["type"] == VMSS and r["name"] == scale_set)
    status, doc = twin.arm.deploy(scale_set, put_body(ss["inputs"]))
    assert status == 200, doc


def roll_state(twin: Twin) -> dict:
    out = controller(twin).run(f"cat {ROLL_STATE_DIR}/{ISLAND}.json", check=False).stdout
    return dict(json.loads(out)) if out.strip() else {}


def test_the_roll_brings_the_island_to_its_new_model_beside_a_job(
    slurm_up: Twin,  # noqa: F811 - the imported fixture
    new_model: dict,
) -> None:
    """The roll engine on the controller (ndfleet-roll, docs/upgrades.md), one node a batch, never below one node in
    service: the node without a job goes first; the job's node is drained and waited for, and reimaged only once its
    job has ended; each comes back under its name on the new model, validated, burned in and resumed."""
    twin, ctl = slurm_up, controller(slurm_up)
    assert twin.arm is not None
    scale_set = scale_set_of(twin)
    ctl.wait_for(f"two idle nodes in service in {ISLAND}", lambda: len(idle_in_service(twin)) >= 2, BOOT_TIMEOUT_S)
    rolled = idle_in_service(twin)
    job_node = rolled[-1]  # the roll takes nodes by name: the job's node goes last, its job still running
    for node in rolled:
        assert dcgm_level(twin, node) == DCGM_BEFORE
    before = {n: boot_features(nodes_by_name(ctl)[n]) for n in rolled}

    job = login(twin).run(
        f"sbatch --parsable -p {ISLAND} -w {job_node} -N 1 --chdir=/tmp --output=/tmp/roll-job-%j.out --wrap "
        + shlex.quote(f"for i in $(seq 1 {JOB_S}); do echo tick $i; sleep 1; done; echo done")
    ).stdout.strip().split(";")[0]  # fmt: skip
    ctl.wait_for(f"job {job} running on {job_node}",
                 lambda: "JobState=RUNNING" in ctl.run(f"scontrol -o show job {job}").stdout, 120)  # fmt: skip

    # The deployment: the island's model changes; no instance runs it yet.
    deploy(twin, scale_set, new_model)
    ids = {n: twin.arm.instance_of(scale_set, n) for n in rolled}
    assert all(i is not None and not twin.arm.latest_model_applied(scale_set, i.instance_id) for i in ids.values())

    t0 = time.monotonic()
    ctl.run(f"{ROLL_PROGRAM} start --island {ISLAND} --scale-set {scale_set} --batch 1 --min-available 1")
    drained_with_job: list[bool] = []

    def finished() -> bool:
        ctl.run(f"{ROLL_PROGRAM} step", check=False)  # the timer's pass, sooner (the state is locked)
        fields = nodes_by_name(ctl).get(job_node, {})
        if "DRAIN" in fields.get("State", "") and "ALLOCATED" in fields.get("State", ""):
            drained_with_job.append(True)
        return roll_state(twin).get("status") in ("done", "stopped", "aborted")

    ctl.wait_for(f"the roll of {ISLAND} to end", finished, ROLL_TIMEOUT_S)
    t_done = time.monotonic()
    state = roll_state(twin)
    log = ctl.run(f"tail -n 40 {ROLL_STATE_DIR}/{ISLAND}.log", check=False).stdout
    assert state.get("status") == "done" and not state.get("failed"), f"{state}\n{log}"
    assert sorted(state.get("rolled", [])) == rolled, state
    assert drained_with_job, f"{job_node} was never seen drained under its job: the roll did not wait for it"

    # Each node runs the new model's boot data, registered with the new boot version; Azure says latest model.
    for node in rolled:
        assert node in twin.reimaged
        assert dcgm_level(twin, node) == DCGM_AFTER
        inst = ids[node]
        assert inst is not None and twin.arm.latest_model_applied(scale_set, inst.instance_id)
        after = boot_features(nodes_by_name(ctl)[node])
        assert len(after) == 1 and after != before[node], (node, before[node], after)

    # The job was undisturbed: it ran to its end on its node, never requeued, its output whole.
    out = ctl.run(f"scontrol -o show job {job}", check=False).stdout
    fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    assert (fields.get("JobState"), fields.get("ExitCode"), fields.get("NodeList"), fields.get("Restarts")) == (
        "COMPLETED", "0:0", job_node, "0"), fields
    # The node was reimaged after the job: its output file went with the old disk, the accounting keeps the end.
    twin.record("roll: island of 2 nodes, one with a 150 s job, start to done", t_done - t0)
