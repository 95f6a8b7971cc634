"""One node of a fixed island rolled by hand to its scale set's new model (issue 42), doing what the roll engine will
do, through the Resource Manager stand-in's rolling-upgrade calls (tests/twin/arm.py):

1. a deployment changes the island's model: the stack's `health.dcgmLevel` 1 -> 2 (an operator raising the DCGM
   diagnostic level, one of the settings issue 42 names: "a threshold"). It changes the node bundle (its
   `/etc/ndfleet/node.json`, which the node shows), so the bundle's Key Vault slots get new versions, the scale set's
   customData (the manifest naming the new parts' sha256) and the Application Health extension's grace period: a
   whole new model, as a new ndfleet release would be, with a change the twin can read on the node;
2. the node is drained with the roll's reason (`names.ROLL_REASON_PREFIX`) while a job runs on another node of the
   island; once it is idle, `manualupgrade` then `reimage` of its instance, each waited for through its
   Azure-AsyncOperation URL;
3. it comes back under its name, validates, registers again, is handed to the burn-in (the roll's drain replaced by
   `names.AWAITING_BURNIN_REASON`: the node's health check leaves another's drain alone, slurm_health.act), is burned
   in with the job's node as its idle partner once the job ended, and is resumed.

The calls go with the controller's own managed identity from inside the controller when the plan grants it the two
actions at the island's scale set (roll42's components); until then the test shows the controller is refused (403,
over real HTTP with its IMDS token) and makes the calls with the deployer's rights (`ResourceManager.as_deployer`).
`BOOT_VERSION_FEATURE` switches on the check of the node's `boot-<version>` Slurm feature (ver42).

Its place in the run (tests/twin/conftest.py, RUN_IN_THE_GRACE_WAIT): among the last tests, just before the test of
the node that failed validation, which waits for the extension's 40-minute grace period: the roll's minutes are
spent inside that wait (docs/twin.md).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time

import pytest
from ndfleet_node.names import AWAITING_BURNIN_REASON, BOOT_VERSION_FEATURE_PREFIX, ROLL_REASON_PREFIX

from tests.twin.arm import API_VERSION, MANUAL_UPGRADE, REIMAGE
from tests.twin.conftest import STACK_FILE
from tests.twin.test_boot import BOOT_TIMEOUT_S
from tests.twin.test_cluster import controller, login, nodes_by_name, slurm_up  # noqa: F401 - slurm_up: a fixture
from tests.twin.twin import Twin

ISLAND = "ib01"
DRAIN_REASON = f"{ROLL_REASON_PREFIX}test"
# The setting the new model changes, and its value before and after (the twin's stack leaves it at its default, 1).
CHANGED_SETTING = ("    validationLevel: full\n", "    validationLevel: full\n    dcgmLevel: 2\n")
DCGM_BEFORE, DCGM_AFTER = 1, 2
# ver42: nodes register with the feature boot-<version>. Switch on once it has landed.
BOOT_VERSION_FEATURE = False
JOB_S = 150  # the other node's job: longer than drain, upgrade, reimage and registration (about 60 s here)

# Run inside the controller: its managed identity's token from the metadata service, then one Resource Manager call.
CONTROLLER_CALL = r"""
import json, sys, urllib.error, urllib.request
method, path, body = sys.argv[1:4]
token_url = ("http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01"
             "&resource=https%3A%2F%2Fmanagement.azure.com")
with urllib.request.urlopen(urllib.request.Request(token_url, headers={"Metadata": "true"}), timeout=30) as r:
    token = json.load(r)["access_token"]
request = urllib.request.Request("https://management.azure.com" + path, data=body.encode() if body else None,
                                 method=method, headers={"Authorization": "Bearer " + token,
                                                         "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=30) as r:
        status, data, headers = r.status, r.read(), dict(r.headers)
except urllib.error.HTTPError as e:
    status, data, headers = e.code, e.read(), dict(e.headers)
print(json.dumps({"status": status, "body": data.decode()[:4000], "headers": headers}))
"""


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


def from_controller(twin: Twin, method: str, path: str, body: object = None) -> tuple[int, str, dict[str, str]]:
    """One Resource Manager call made inside the controller with its managed identity (real HTTP and TLS)."""
    data = "" if body is None else json.dumps(body)
    cp = controller(twin).run(f"python3 -c {shlex.quote(CONTROLLER_CALL)} {method} {shlex.quote(path)} "
                              f"{shlex.quote(data)}", timeout=90)  # fmt: skip
    doc = json.loads(cp.stdout)
    return int(doc["status"]), str(doc["body"]), dict(doc["headers"])


def roll_call(twin: Twin, scale_set: str, action: str, instance_id: str) -> dict[str, str]:
    """`POST .../<action>` of one instance as the roll engine makes it; its 202's headers."""
    assert twin.arm is not None
    path, body = scale_set_path(twin, scale_set, action), {"instanceIds": [instance_id]}
    granted = all(twin.arm.may(a, twin.arm.scale_sets[scale_set].resource_id) for a in (MANUAL_UPGRADE, REIMAGE))
    status, text, headers = from_controller(twin, "POST", path, body)
    if granted:
        assert status == 202, f"{action}: {status} {text}"
        return headers
    # The plan does not give the controller the roll's actions yet (roll42's components will): refused, by name.
    assert status == 403 and "AuthorizationFailed" in text and "/action" in text, f"{action}: {status} {text}"
    status2, doc, headers2 = twin.arm.as_deployer("POST", path, body)
    assert status2 == 202, f"{action} as the deployer: {status2} {doc}"
    return headers2


def wait_operation(twin: Twin, headers: dict[str, str], timeout: float) -> tuple[list[str], dict]:
    """Poll the operation's Azure-AsyncOperation URL until it ends: the statuses seen, and the last answer."""
    assert twin.arm is not None
    url = next(v for k, v in headers.items() if k.lower() == "azure-asyncoperation")
    path = url.split("management.azure.com", 1)[1]
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, doc, _ = twin.arm.as_deployer("GET", path)
        assert status == 200, (status, doc)
        seen.append(doc["status"])
        if doc["status"] != "InProgress":
            return seen, doc
        time.sleep(1)
    raise AssertionError(f"operation {path} still InProgress after {timeout:.0f} s: {seen[-3:]}")


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


def test_a_node_rolled_by_hand_comes_back_on_the_new_model_beside_a_job(
    slurm_up: Twin,  # noqa: F811 - the imported fixture
    new_model: dict,
) -> None:
    twin, ctl = slurm_up, controller(slurm_up)
    assert twin.arm is not None
    scale_set = scale_set_of(twin)
    ctl.wait_for(f"two idle nodes in service in {ISLAND}", lambda: len(idle_in_service(twin)) >= 2, BOOT_TIMEOUT_S)
    job_node, node = idle_in_service(twin)[:2]
    inst = twin.arm.instance_of(scale_set, node)
    assert inst is not None, f"{node} is not an instance of {scale_set} in the stand-in"
    others = [i.instance_id for i in twin.arm.scale_sets[scale_set].instances.values() if i.computer_name != node]
    before = nodes_by_name(ctl)[node]
    assert dcgm_level(twin, node) == DCGM_BEFORE

    # The other node's job, running before the roll starts.
    job = login(twin).run(
        f"sbatch --parsable -p {ISLAND} -w {job_node} -N 1 --chdir=/tmp --output=/tmp/roll-job-%j.out --wrap "
        + shlex.quote(f"for i in $(seq 1 {JOB_S}); do echo tick $i; sleep 1; done; echo done")
    ).stdout.strip().split(";")[0]  # fmt: skip
    ctl.wait_for(f"job {job} running on {job_node}",
                 lambda: "JobState=RUNNING" in ctl.run(f"scontrol -o show job {job}").stdout, 120)  # fmt: skip

    # The deployment: the island's model changes; no instance runs it yet.
    assert twin.arm.latest_model_applied(scale_set, inst.instance_id)
    deploy(twin, scale_set, new_model)
    assert not twin.arm.latest_model_applied(scale_set, inst.instance_id)
    listed = {i["instanceId"]: i["properties"]["latestModelApplied"]
              for i in twin.arm.as_deployer("GET", scale_set_path(twin, scale_set, "virtualMachines"))[1]["value"]}
    assert listed == {i: False for i in [inst.instance_id, *others]}, listed  # fmt: skip

    # 1. drain, and wait until the node has no job (it had none: drained at once).
    t0 = time.monotonic()
    ctl.run(f"scontrol update nodename={node} state=drain reason={shlex.quote(DRAIN_REASON)}")
    ctl.wait_for(f"{node} drained", lambda: "DRAIN" in nodes_by_name(ctl)[node]["State"]
                 and "ALLOCATED" not in nodes_by_name(ctl)[node]["State"], 300)  # fmt: skip
    t_drained = time.monotonic()

    # 2. the instance to the latest model, then reimaged.
    seen, done = wait_operation(twin, roll_call(twin, scale_set, "manualupgrade", inst.instance_id), 120)
    assert done["status"] == "Succeeded" and seen[0] == "InProgress", (seen, done)
    assert twin.arm.latest_model_applied(scale_set, inst.instance_id)
    assert not any(twin.arm.latest_model_applied(scale_set, i) for i in others)
    t_reimage = time.monotonic()
    seen, done = wait_operation(twin, roll_call(twin, scale_set, "reimage", inst.instance_id), BOOT_TIMEOUT_S)
    assert done["status"] == "Succeeded", (seen, done)
    assert node in twin.reimaged and node not in twin.removed

    # 3. back under its name: validated, registered again (a new slurmd), handed to the burn-in, resumed.
    ctl.wait_for(f"{node} validated after its reimage", lambda: node in twin.machines
                 and twin.machine(node).unit_state("ndfleet-validated.target") == "active", BOOT_TIMEOUT_S)  # fmt: skip
    t_validated = time.monotonic()

    def registered() -> bool:
        fields = nodes_by_name(ctl).get(node, {})
        flags = set(fields.get("State", "").split("+"))
        return fields.get("SlurmdStartTime") != before.get("SlurmdStartTime") and not flags & {"DOWN", "NOT_RESPONDING"}

    ctl.wait_for(f"{node} registered again", registered, BOOT_TIMEOUT_S)
    t_registered = time.monotonic()
    assert nodes_by_name(ctl)[node]["Reason"].startswith(DRAIN_REASON), nodes_by_name(ctl)[node]
    ctl.run(f"scontrol update nodename={node} state=drain reason={shlex.quote(AWAITING_BURNIN_REASON)}")
    ctl.wait_for(f"{node} burned in and resumed", lambda: in_service(nodes_by_name(ctl)[node]), BOOT_TIMEOUT_S)
    t_resumed = time.monotonic()

    # It runs the new model's boot data; the other node still the old.
    assert dcgm_level(twin, node) == DCGM_AFTER
    assert dcgm_level(twin, job_node) == DCGM_BEFORE
    if BOOT_VERSION_FEATURE:
        after, other = boot_features(nodes_by_name(ctl)[node]), boot_features(nodes_by_name(ctl)[job_node])
        assert len(after) == 1 and len(other) == 1 and after != other, (after, other)

    # The other node's job was undisturbed: it ran to its end on its node, never requeued, its output whole.
    def job_fields() -> dict[str, str]:
        out = ctl.run(f"scontrol -o show job {job}", check=False).stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    ctl.wait_for(f"job {job} completed", lambda: job_fields().get("JobState") == "COMPLETED", 2 * JOB_S)
    fields = job_fields()
    assert (fields.get("ExitCode"), fields.get("NodeList"), fields.get("Restarts")) == ("0:0", job_node, "0"), fields
    out = twin.machine(job_node).run(f"cat /tmp/roll-job-{job}.out").stdout.splitlines()
    assert out == [f"tick {i}" for i in range(1, JOB_S + 1)] + ["done"], out[-3:]

    for what, seconds in (("roll by hand: drain to drained", t_drained - t0),
                          ("roll by hand: reimage to validated", t_validated - t_reimage),
                          ("roll by hand: reimage to registered", t_registered - t_reimage),
                          ("roll by hand: registered to resumed (burn-in)", t_resumed - t_registered),
                          ("roll by hand: drain to resumed", t_resumed - t0)):  # fmt: skip
        twin.record(what, seconds)
