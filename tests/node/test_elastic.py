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
from ndfleet_node.elastic.programs import (
    RESUME_FAILED_REASON,
    Context,
    IslandSettings,
    Settings,
    reconcile,
    resume,
    resume_fail,
    resume_jobs,
    suspend,
)
from ndfleet_node.elastic.state import island_state
from ndfleet_node.names import AWAITING_BURNIN_REASON
from ndfleet_node.scontrol import Scontrol

from tests.impact.arm_server import loopback_up

SCALE_SET = "dev-gpu-vmss"


@dataclass
class FakeScaleSet:
    """Azure's side of one Uniform scale set: capacity and instances, as the REST API shows them."""

    capacity: int = 0
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> computer name
    next_id: int = 0
    status: int = 200  # answer every request with this status instead (403: the role is missing)
    create_on_scale: bool = True  # False: Azure accepts the capacity but no VM ever appears
    fail_next: int = 0  # answer this many requests 503 first (Resource Manager busy)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)

    def add(self) -> str:
        iid = str(self.next_id)
        self.instances[iid] = f"dev-gpu-{self.next_id:06x}"
        self.next_id += 1
        return iid


@pytest.fixture
def azure() -> Iterator[tuple[FakeScaleSet, str]]:
    loopback_up()
    fake = FakeScaleSet()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, doc: Any) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
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
            if not path.endswith(f"/virtualMachineScaleSets/{SCALE_SET}") and f"/{SCALE_SET}/" not in path:
                self._answer(404, {"error": {"code": "NotFound", "message": path}})
            elif method == "GET" and path.endswith("/virtualMachines"):
                value = [{"instanceId": i, "properties": {"osProfile": {"computerName": n},
                          "provisioningState": "Succeeded"}} for i, n in fake.instances.items()]  # fmt: skip
                self._answer(200, {"value": value})
            elif method == "GET":
                self._answer(200, {"sku": {"capacity": fake.capacity}})
            elif method == "PATCH":
                new = body["sku"]["capacity"]
                if fake.create_on_scale:
                    for _ in range(new - fake.capacity):
                        fake.add()
                fake.capacity = new
                self._answer(200, {"sku": {"capacity": new}})
            elif method == "POST" and path.endswith("/delete"):
                for iid in body["instanceIds"]:
                    if fake.instances.pop(iid, None) is not None:
                        fake.capacity -= 1
                self._answer(202, {})
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


@pytest.fixture
def world(azure: tuple[FakeScaleSet, str], tmp_path: Path) -> tuple[Context, FakeScaleSet, FakeScontrol]:
    fake, endpoint = azure
    island = IslandSettings("gpu", SCALE_SET, min_nodes=0, max_nodes=4)
    settings = Settings(islands={"gpu": island}, state_dir=tmp_path / "state", claim_wait_s=30, poll_s=0.01,
                        unclaimed_grace_s=600)  # fmt: skip
    scontrol = FakeScontrol()
    clock = [1000.0]

    def sleep(s: float) -> None:
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
    assert fake.instances == {}
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
    assert fake.instances == {}


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
