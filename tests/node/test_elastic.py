"""The elastic programs (ndfleet_node/elastic) against a Resource Manager stand-in on 127.0.0.1 and a fake scontrol."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node.elastic.arm import ArmError, ScaleSetApi
from ndfleet_node.elastic.context import Context, IslandSettings, Settings
from ndfleet_node.elastic.programs import (
    RESUME_FAILED_REASON,
    reconcile,
    resume,
    resume_fail,
    resume_jobs,
    suspend,
)
from ndfleet_node.elastic.state import island_state
from ndfleet_node.names import AWAITING_BURNIN_REASON, VM_FAILED_REASON
from ndfleet_node.scontrol import Scontrol

from tests.impact.arm_server import loopback_up

SCALE_SET = "dev-gpu-vmss"


# Resource Manager's answers, as Microsoft Learn documents them:
# - "Virtual Machine Scale Set VMs - List": each instance's `properties.provisioningState` (Creating, Updating,
#   Succeeded, Deleting, Failed: "Virtual machine states and billing", provisioning states);
# - "Virtual Machine Scale Sets - Delete Instances": 200 OK or 202 Accepted, the latter with `Azure-AsyncOperation`
#   and `Location` headers ("Track asynchronous Azure operations"); the instances are `Deleting` until they leave
#   the list (here: after one more listing);
# - 429 Too Many Requests with `Retry-After` in seconds ("Understand how Azure Resource Manager throttles
#   requests"); 409 Conflict while another operation holds the scale set; 5xx, retryable ("Azure REST API
#   reference", common errors). `delete_answers` injects those for the next deletes.
# - the roll's calls: "Virtual Machine Scale Sets - Update Instances" (POST .../manualupgrade) and "- Reimage" (POST
#   .../reimage), each `{"instanceIds": [...]}`, answered 202 Accepted with Azure-AsyncOperation and Location like a
#   delete; the operation's URL answers `{"status": "InProgress" | "Succeeded" | "Failed" | "Canceled"}` ("Track
#   asynchronous Azure operations"); "Virtual Machine Scale Set VMs - List" gives each instance's
#   `properties.latestModelApplied`, true once Update Instances applied the model; "Virtual Machine Scale Sets - Get"
#   gives the scale set's `tags`.
ASYNC_OPERATION = "/subscriptions/sub/providers/Microsoft.Compute/locations/eastus/operations/{n}?api-version=" + (
    "2024-07-01"
)


@dataclass
class FakeScaleSet:
    """Azure's side of one Uniform scale set: capacity and instances, as the REST API shows them."""

    capacity: int = 0
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> computer name
    states: dict[str, str] = field(default_factory=dict)  # instance id -> provisioningState (absent: Succeeded)
    next_id: int = 0
    status: int = 200  # answer every request with this status instead (403: the role is missing)
    create_on_scale: bool = True  # False: Azure accepts the capacity but no VM ever appears
    new_state: str = "Succeeded"  # the provisioningState new instances show (Failed: an allocation that failed)
    fail_next: int = 0  # answer this many requests 503 first (Resource Manager busy)
    # The next deletes' answers, in order: (status, headers); an accepted delete is answered 202 as above.
    delete_answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    delete_lost: bool = False  # accept deletes with 202 but never carry them out (Azure's operation failed)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    stale: set[str] = field(default_factory=set)  # instances whose latestModelApplied is false
    operation_status: str = "Succeeded"  # what every async operation's URL answers
    on_reimage: list[Any] = field(default_factory=list)  # called with the instance ids of each reimage (a VM's boot)

    def add(self, state: str = "Succeeded") -> str:
        iid = str(self.next_id)
        self.instances[iid] = f"dev-gpu-{self.next_id:06x}"
        self.states[iid] = state
        self.next_id += 1
        return iid

    def settle(self) -> None:
        """Azure finishes every delete under way: the Deleting instances leave the list."""
        for iid in [i for i, st in self.states.items() if st == "Deleting"]:
            self.instances.pop(iid, None)
            self.states.pop(iid, None)

    def deletes(self) -> list[list[str]]:
        return [body["instanceIds"] for method, path, body in self.requests
                if method == "POST" and path.split("?")[0].endswith("/delete")]  # fmt: skip

    def posts(self, action: str) -> list[list[str]]:
        return [body["instanceIds"] for method, path, body in self.requests
                if method == "POST" and path.split("?")[0].endswith(f"/{action}")]  # fmt: skip


@pytest.fixture
def azure() -> Iterator[tuple[FakeScaleSet, str]]:
    loopback_up()
    fake = FakeScaleSet()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(doc).encode() if doc is not None else b""
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body: Any = json.loads(self.rfile.read(length)) if length else None
            fake.requests.append((method, self.path, body))
            if fake.fail_next > 0:
                fake.fail_next -= 1
                self._answer(503, {"error": {"code": "ServiceUnavailable", "message": "busy"}})
                return
            if fake.status != 200:
                self._answer(fake.status, {"error": {"code": "AuthorizationFailed", "message": "no"}})
                return
            path = self.path.split("?")[0]
            if method == "GET" and "/operations/" in path:
                self._answer(200, {"status": fake.operation_status})
                return
            if not path.endswith(f"/virtualMachineScaleSets/{SCALE_SET}") and f"/{SCALE_SET}/" not in path:
                self._answer(404, {"error": {"code": "NotFound", "message": path}})
            elif method == "GET" and path.endswith("/virtualMachines"):
                value = [{"instanceId": i, "properties": {"osProfile": {"computerName": n},
                          "provisioningState": fake.states.get(i, "Succeeded"),
                          "latestModelApplied": i not in fake.stale}}
                         for i, n in fake.instances.items()]  # fmt: skip
                if not fake.delete_lost:
                    fake.settle()  # listed Deleting once, then gone
                self._answer(200, {"value": value})
            elif method == "GET":
                self._answer(200, {"sku": {"capacity": fake.capacity}, "tags": fake.tags})
            elif method == "PATCH":
                new = body["sku"]["capacity"]
                if fake.create_on_scale:
                    for _ in range(new - fake.capacity):
                        fake.add(fake.new_state)
                fake.capacity = new
                self._answer(200, {"sku": {"capacity": new}})
            elif method == "POST" and path.endswith("/delete"):
                if fake.delete_answers:
                    status, headers = fake.delete_answers.pop(0)
                    code = {409: "Conflict", 429: "TooManyRequests"}.get(status, "InternalServerError")
                    self._answer(status, {"error": {"code": code, "message": "try later"}}, headers)
                    return
                for iid in body["instanceIds"]:
                    if iid in fake.instances and fake.states.get(iid) != "Deleting":
                        fake.capacity -= 1
                        if not fake.delete_lost:
                            fake.states[iid] = "Deleting"
                operation = "http://" + self.headers["Host"] + ASYNC_OPERATION.format(n=len(fake.requests))
                self._answer(202, None, {"Azure-AsyncOperation": operation, "Location": operation})
            elif method == "POST" and path.endswith(("/manualupgrade", "/reimage")):
                for iid in body["instanceIds"]:
                    if path.endswith("/manualupgrade"):
                        fake.stale.discard(iid)
                for hook in fake.on_reimage if path.endswith("/reimage") else []:
                    hook(body["instanceIds"])
                operation = "http://" + self.headers["Host"] + ASYNC_OPERATION.format(n=len(fake.requests))
                self._answer(202, None, {"Azure-AsyncOperation": operation, "Location": operation})
            else:
                self._answer(405, {})

        def do_GET(self) -> None:
            self._handle("GET")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_POST(self) -> None:
            self._handle("POST")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class FakeScontrol(Scontrol):
    """Records every call; `show node` answers from `self.listing` (one line per node)."""

    def __init__(self) -> None:
        super().__init__(("scontrol",), 5)
        self.calls: list[tuple[str, ...]] = []
        self.listing: dict[str, str] = {}
        self.refuse: set[str] = set()  # first arguments that fail (e.g. "requeuehold")

    def call(self, *args: str, max_bytes: int = 0) -> str:
        self.calls.append(args)
        if args[0] in self.refuse:
            from ndfleet_node.scontrol import SlurmError

            raise SlurmError(f"scontrol {args[0]}: refused")
        if args[:2] == ("show", "hostnames"):
            m = re.fullmatch(r"(.+)-\[(\d+)-(\d+)\]", args[2])
            if m:
                return "\n".join(f"{m.group(1)}-{n}" for n in range(int(m.group(2)), int(m.group(3)) + 1))
            return "\n".join(args[2].split(","))
        if args[:2] == ("show", "node"):
            return "\n".join(f"NodeName={name} {rest}" for name, rest in self.listing.items())
        return ""

    def updates(self) -> list[tuple[str, ...]]:
        return [c[1:] for c in self.calls if c[0] == "update"]


sleeps: list[float] = []  # every wait the programs asked for, in the world below


@pytest.fixture
def world(azure: tuple[FakeScaleSet, str], tmp_path: Path) -> tuple[Context, FakeScaleSet, FakeScontrol]:
    fake, endpoint = azure
    island = IslandSettings("gpu", SCALE_SET, min_nodes=0, max_nodes=4)
    settings = Settings(islands={"gpu": island}, state_dir=tmp_path / "state", claim_wait_s=30, poll_s=0.01,
                        unclaimed_grace_s=600)  # fmt: skip
    scontrol = FakeScontrol()
    clock = [1000.0]
    sleeps.clear()

    def sleep(s: float) -> None:
        sleeps.append(s)
        clock[0] += s

    ctx = Context(
        settings,
        lambda i: ScaleSetApi("sub", "rg", i.scale_set, lambda: "token", endpoint=endpoint),
        scontrol,
        now=lambda: clock[0],
        sleep=sleep,
    )
    return ctx, fake, scontrol


def mapping(ctx: Context) -> dict[str, str]:
    with island_state(ctx.settings.state_dir, "gpu") as state:
        return {n: e.instance_id for n, e in state.nodes.items()}


def test_resume_raises_capacity_by_the_missing_vms_and_claims_each_for_a_node(world: Any) -> None:
    ctx, fake, scontrol = world
    assert resume(ctx, ["gpu-1", "gpu-2"], None) == 0
    assert fake.capacity == 2
    assert mapping(ctx) == {"gpu-1": "0", "gpu-2": "1"}
    assert ("NodeName=gpu-1", "NodeHostname=dev-gpu-000000") in scontrol.updates()


def test_resume_asks_again_when_resource_manager_failed_the_first_time(world: Any) -> None:
    ctx, fake, _ = world
    fake.fail_next = 1
    resume(ctx, ["gpu-1"], None)
    assert (fake.capacity, mapping(ctx)) == (1, {"gpu-1": "0"})


def test_resume_drains_its_nodes_awaiting_burnin_before_anything_else(world: Any) -> None:
    ctx, _, scontrol = world
    resume(ctx, ["gpu-1"], None)
    assert scontrol.updates()[0] == ("NodeName=gpu-1", "State=DRAIN", f"Reason={AWAITING_BURNIN_REASON}")


def test_a_second_resume_does_not_ask_again_for_vms_azure_has_not_listed_yet(world: Any) -> None:
    ctx, fake, _ = world
    fake.create_on_scale = False  # the first resume's VMs are not there yet
    ctx.settings = Settings(**{**ctx.settings.__dict__, "claim_wait_s": 0})
    resume(ctx, ["gpu-1", "gpu-2"], None)
    resume(ctx, ["gpu-3"], None)
    assert fake.capacity == 3


def test_resume_holds_the_jobs_of_its_nodes_and_reconcile_releases_them_after_burnin(
    world: Any, tmp_path: Path
) -> None:
    ctx, _, scontrol = world
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(json.dumps({"jobs": [{"job_id": 42, "nodes_resume": "gpu-[1-2]"}]}))
    resume(ctx, ["gpu-1", "gpu-2"], str(resume_file))
    assert ("hold", "42") in scontrol.calls
    scontrol.listing = {"gpu-1": "State=IDLE+DRAIN+CLOUD Reason=" + AWAITING_BURNIN_REASON, "gpu-2": "State=IDLE+CLOUD"}
    reconcile(ctx)
    assert ("release", "42") not in scontrol.calls
    scontrol.listing["gpu-1"] = "State=IDLE+CLOUD"
    reconcile(ctx)
    assert ("release", "42") in scontrol.calls


def test_a_job_that_cannot_be_held_is_reported(world: Any, tmp_path: Path) -> None:
    ctx, _, scontrol = world
    scontrol.refuse.update({"hold", "requeuehold"})
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(json.dumps({"jobs": [{"job_id": 7, "nodes_resume": "gpu-1"}]}))
    assert resume(ctx, ["gpu-1"], str(resume_file)) == 1
    assert any("job 7 keeps its new nodes" in p for p in ctx.problems)


def test_a_job_still_running_on_its_new_nodes_is_requeued_and_held(world: Any, tmp_path: Path) -> None:
    ctx, _, scontrol = world
    scontrol.refuse.add("hold")  # not pending: Slurm did not requeue it when its nodes were drained
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(json.dumps({"jobs": [{"job_id": 8, "nodes": "gpu-1"}]}))
    resume(ctx, ["gpu-1"], str(resume_file))
    assert ("requeuehold", "8") in scontrol.calls


def test_the_jobs_nodes_are_read_from_slurm_22_05s_resume_file(tmp_path: Path) -> None:
    resume_file = tmp_path / "resume.json"
    resume_file.write_text('{"jobs":[{"job_id":1,"nodes":"gpu-[1-2]"}],"all_nodes":"gpu-[1-2]"}')
    assert resume_jobs(str(resume_file)) == {"1": "gpu-[1-2]"}


def test_resume_that_gets_no_vm_in_time_fails(world: Any) -> None:
    ctx, fake, _ = world
    fake.create_on_scale = False
    assert resume(ctx, ["gpu-1"], None) == 1
    assert any("no VM for gpu-1" in p for p in ctx.problems)


def test_suspend_deletes_exactly_the_nodes_vms(world: Any) -> None:
    ctx, fake, _ = world
    resume(ctx, ["gpu-1", "gpu-2"], None)
    assert suspend(ctx, ["gpu-2"]) == 0
    assert fake.states == {"0": "Succeeded", "1": "Deleting"}
    fake.settle()
    assert fake.instances == {"0": "dev-gpu-000000"}
    assert ("POST", f"/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/"
            f"{SCALE_SET}/delete?api-version=2024-07-01", {"instanceIds": ["1"]}) in fake.requests  # fmt: skip
    assert mapping(ctx) == {"gpu-1": "0"}


def test_suspend_keeps_the_vm_of_a_node_that_runs_a_job(world: Any) -> None:
    ctx, fake, scontrol = world
    resume(ctx, ["gpu-1"], None)
    scontrol.listing = {"gpu-1": "State=ALLOCATED+CLOUD"}
    assert suspend(ctx, ["gpu-1"]) == 1
    assert fake.instances == {"0": "dev-gpu-000000"}


def test_resume_fail_deletes_the_half_made_vm_and_returns_the_node_to_the_pool(world: Any) -> None:
    ctx, fake, scontrol = world
    resume(ctx, ["gpu-1"], None)
    assert resume_fail(ctx, ["gpu-1"]) == 1
    assert fake.states == {"0": "Deleting"}
    assert ("NodeName=gpu-1", "State=POWER_DOWN_FORCE", f"Reason={RESUME_FAILED_REASON}") in scontrol.updates()
    assert mapping(ctx) == {}


def test_reconcile_gives_a_repaired_vm_to_the_node_whose_vm_is_gone(world: Any) -> None:
    ctx, fake, scontrol = world
    resume(ctx, ["gpu-1"], None)
    del fake.instances["0"]  # automatic repairs: the VM is replaced by a new one
    fake.add()
    reconcile(ctx)
    assert mapping(ctx) == {"gpu-1": "1"}
    assert ("NodeName=gpu-1", "State=DRAIN", f"Reason={AWAITING_BURNIN_REASON}") in scontrol.updates()


def test_reconcile_deletes_a_vm_nobody_claimed_after_the_grace_period(world: Any) -> None:
    ctx, fake, _ = world
    fake.add()  # e.g. the late VM of a resume that failed
    fake.capacity = 1
    reconcile(ctx)
    assert fake.instances
    ctx.now = lambda: 1000.0 + ctx.settings.unclaimed_grace_s
    reconcile(ctx)
    assert fake.states == {"0": "Deleting"}
    reconcile(ctx)  # listed Deleting: waited for
    assert deleting(ctx) == {"0": ("", 1, True)}
    reconcile(ctx)  # the list no longer has it: the delete is confirmed and forgotten
    assert (fake.instances, deleting(ctx)) == ({}, {})


def test_reconcile_powers_up_nodes_until_min_nodes_are_up(world: Any) -> None:
    ctx, _, scontrol = world
    ctx.settings.islands["gpu"] = IslandSettings("gpu", SCALE_SET, min_nodes=2, max_nodes=4)
    scontrol.listing = {f"gpu-{n}": "State=IDLE+CLOUD+POWERED_DOWN" for n in range(1, 5)}
    scontrol.listing["gpu-3"] = "State=IDLE+CLOUD"
    reconcile(ctx)
    assert ("NodeName=gpu-1", "State=POWER_UP") in scontrol.updates()


def test_a_refused_request_names_the_request_and_azures_error(world: Any) -> None:
    ctx, fake, _ = world
    fake.status = 403
    api = ctx.scale_set(ctx.settings.islands["gpu"])
    with pytest.raises(ArmError, match=r"scale dev-gpu-vmss to 3: HTTP 403: AuthorizationFailed no"):
        api.set_capacity(3)


def test_nodes_outside_the_elastic_islands_are_refused(world: Any) -> None:
    ctx, fake, _ = world
    assert resume(ctx, ["other-1", "gpu-9"], None) == 1
    assert fake.requests == []


def test_a_held_job_whose_new_node_did_not_come_up_is_released_to_be_scheduled_again(
    world: Any, tmp_path: Path
) -> None:
    ctx, _, scontrol = world
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(json.dumps({"jobs": [{"job_id": 43, "nodes_resume": "gpu-[1-2]"}]}))
    resume(ctx, ["gpu-1", "gpu-2"], str(resume_file))
    scontrol.listing = {
        "gpu-1": "State=IDLE+DRAIN+CLOUD Reason=" + AWAITING_BURNIN_REASON,
        "gpu-2": "State=IDLE+DRAIN+CLOUD+POWERING_UP Reason=" + AWAITING_BURNIN_REASON,
    }
    reconcile(ctx)
    assert ("release", "43") not in scontrol.calls
    # gpu-2's resume failed: resume-fail powered it down into the pool again; gpu-1 will not be burned in alone.
    scontrol.listing["gpu-2"] = "State=IDLE+CLOUD+POWERED_DOWN Reason=ndfleet:elastic:resume-failed"
    reconcile(ctx)
    assert ("release", "43") in scontrol.calls
    assert "job 43 released: gpu-2 did not come up" in (ctx.settings.state_dir / "elastic.log").read_text()


# --- deletes that Azure refuses for now, or accepts and does not carry out (docs/elastic.md) ----------------------
def deleting(ctx: Context) -> dict[str, tuple[str, int, bool]]:
    with island_state(ctx.settings.state_dir, "gpu") as state:
        return {i: (e.node, e.attempts, e.accepted) for i, e in state.deleting.items()}


def test_a_refused_delete_is_asked_again_after_retry_after_or_a_backoff(world: Any) -> None:
    ctx, fake, _ = world
    resume(ctx, ["gpu-1"], None)
    sleeps.clear()
    fake.delete_answers = [(429, {"Retry-After": "7"}), (409, {}), (503, {})]
    assert suspend(ctx, ["gpu-1"]) == 0
    assert fake.deletes() == [["0"]] * 4
    assert sleeps == [7.0, 4.0, 8.0]  # Retry-After, then 2**attempt without one
    assert fake.states == {"0": "Deleting"}
    assert deleting(ctx) == {"0": ("gpu-1", 1, True)}  # on record until the list confirms it
    reconcile(ctx)
    reconcile(ctx)
    assert (fake.instances, deleting(ctx)) == ({}, {})


def test_a_delete_still_refused_after_the_budget_stays_on_record_and_reconcile_finishes_it(world: Any) -> None:
    ctx, fake, _ = world
    ctx.settings = Settings(**{**ctx.settings.__dict__, "delete_budget_s": 100})
    resume(ctx, ["gpu-1"], None)
    sleeps.clear()
    fake.delete_answers = [(429, {"Retry-After": "60"})] * 3
    assert suspend(ctx, ["gpu-1"]) == 1
    assert sleeps == [60.0]  # a second wait of 60 s would pass the 100 s budget: given up at once instead
    assert any("not deleted yet" in p and "HTTP 429" in p for p in ctx.problems)
    assert mapping(ctx) == {}  # Slurm's node is released; its VM is not forgotten:
    assert deleting(ctx) == {"0": ("gpu-1", 1, False)}
    reconcile(ctx)  # answered 429 once more (its Retry-After past the reconcile's budget): still on record
    assert fake.states == {"0": "Succeeded"} and deleting(ctx)["0"][1] == 2
    reconcile(ctx)  # accepted
    assert fake.states == {"0": "Deleting"}
    reconcile(ctx)  # listed Deleting
    reconcile(ctx)  # gone: confirmed
    assert (fake.instances, deleting(ctx)) == ({}, {})


def test_a_delete_accepted_but_not_carried_out_is_asked_again_until_the_vm_is_gone(world: Any) -> None:
    ctx, fake, _ = world
    resume(ctx, ["gpu-1"], None)
    fake.delete_lost = True  # 202, but Azure's operation fails: the VM stays, Succeeded
    assert suspend(ctx, ["gpu-1"]) == 0
    reconcile(ctx)
    assert fake.deletes() == [["0"], ["0"]]
    assert fake.instances == {"0": "dev-gpu-000000"} and deleting(ctx) == {"0": ("gpu-1", 2, True)}
    fake.delete_lost = False
    reconcile(ctx)  # asked again, accepted, Deleting
    reconcile(ctx)  # listed Deleting
    reconcile(ctx)  # gone: confirmed
    assert (fake.instances, deleting(ctx)) == ({}, {})


def test_a_delete_refused_for_good_is_not_retried_but_kept_on_record(world: Any) -> None:
    ctx, fake, _ = world
    resume(ctx, ["gpu-1"], None)
    sleeps.clear()
    fake.delete_answers = [(403, {})]
    assert suspend(ctx, ["gpu-1"]) == 1
    assert (fake.deletes(), sleeps) == ([["0"]], [])
    assert deleting(ctx) == {"0": ("gpu-1", 1, False)}


def test_a_vm_being_deleted_is_not_claimed_twice_nor_given_to_another_node(world: Any) -> None:
    ctx, fake, _ = world
    resume(ctx, ["gpu-1"], None)
    fake.delete_answers = [(429, {"Retry-After": "1"})] * 40  # Azure will not take the delete for a while
    suspend(ctx, ["gpu-1"])
    fake.delete_answers = []
    resume(ctx, ["gpu-2"], None)  # instance 0 is still there, Succeeded, but on record for deletion
    assert mapping(ctx) == {"gpu-2": "1"}


# --- resume claims only usable VMs; a Failed one is given up at once --------------------------------------------
def test_resume_never_claims_a_vm_azure_is_deleting(world: Any) -> None:
    ctx, fake, _ = world
    fake.add("Deleting")  # e.g. the VM of a node released a moment ago, not gone yet (not in the capacity)
    assert resume(ctx, ["gpu-1"], None) == 0
    assert mapping(ctx) == {"gpu-1": "1"}
    assert ("NodeName=gpu-1", "NodeHostname=dev-gpu-000000") not in ctx.scontrol.updates()


def test_a_vm_that_failed_is_given_up_at_once_its_node_returned_to_the_pool_and_the_vm_deleted(world: Any) -> None:
    ctx, fake, scontrol = world
    fake.new_state = "Failed"  # e.g. AllocationFailed: the instance stays in the list, Failed
    sleeps.clear()
    assert resume(ctx, ["gpu-1"], None) == 1
    assert sum(sleeps) < ctx.settings.claim_wait_s  # not the whole wait
    assert ("NodeName=gpu-1", "State=POWER_DOWN_FORCE", f"Reason={VM_FAILED_REASON}") in scontrol.updates()
    assert any("is Failed: deleted, and gpu-1 given up" in p for p in ctx.problems)
    assert fake.deletes() == [["0"]] and fake.states == {"0": "Deleting"}
    assert mapping(ctx) == {}


def test_a_claimed_vm_that_fails_before_its_node_registers_is_given_up(world: Any) -> None:
    ctx, fake, scontrol = world
    resume(ctx, ["gpu-1"], None)
    fake.states["0"] = "Failed"
    scontrol.listing = {"gpu-1": "State=IDLE+DRAIN+CLOUD+POWERING_UP Reason=" + AWAITING_BURNIN_REASON}
    reconcile(ctx)
    assert ("NodeName=gpu-1", "State=POWER_DOWN_FORCE", f"Reason={VM_FAILED_REASON}") in scontrol.updates()
    assert fake.states == {"0": "Deleting"}


def test_a_node_that_is_up_keeps_its_vm_when_azure_reports_it_failed(world: Any) -> None:
    """A running VM shows Failed also when only an extension or a model update failed: its job must not die."""
    ctx, fake, scontrol = world
    resume(ctx, ["gpu-1"], None)
    fake.states["0"] = "Failed"
    scontrol.listing = {"gpu-1": "State=ALLOCATED+CLOUD"}
    reconcile(ctx)
    assert fake.deletes() == [] and mapping(ctx) == {"gpu-1": "0"}
