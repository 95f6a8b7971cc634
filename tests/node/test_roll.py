"""The roll engine (ndfleet_node/roll) against test_elastic.py's Resource Manager stand-in and a fake scontrol whose
nodes change state as Slurm's would: a drain keeps a running job, a reimaged VM registers again under its name with
the new boot version's feature, drained awaiting burn-in, and the burn-in resumes it or drains it with its verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ndfleet_node.elastic.arm import ScaleSetApi
from ndfleet_node.names import (
    AWAITING_BURNIN_REASON,
    BOOT_VERSION_FEATURE_PREFIX,
    ROLL_REASON_PREFIX,
    SPARES_RESERVATION_PREFIX,
    TAG_BOOT_VERSION,
    TAG_SLURM_RELEASE,
)
from ndfleet_node.roll import engine
from ndfleet_node.roll import state as rs

from tests.node.test_elastic import SCALE_SET, FakeScaleSet, FakeScontrol

OLD, NEW = "v1aaaa", "v2bbbb"


class SlurmWorld(FakeScontrol):
    """Nodes as dicts (state, reason, features, job); `update` and `requeue` act on them as slurmctld does."""

    def __init__(self) -> None:
        super().__init__()
        self.fleet: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, str]] = {}  # job id -> {"node", "requeue": "0"|"1"}
        self.ctld = "slurm 24.11.1"
        self.spares = ""

    def call(self, *args: str, max_bytes: int = 0) -> str:
        if args[:1] == ("version",):
            self.calls.append(args)
            return self.ctld + "\n"
        if args[:2] == ("show", "reservation"):
            self.calls.append(args)
            if not self.spares:
                return "No reservations in the system\n"
            return (f"ReservationName={SPARES_RESERVATION_PREFIX}gpu StartTime=2026-12-07T00:00:00 Nodes={self.spares} "
                    "NodeCnt=1 Flags=MAINT,SPEC_NODES\n")  # fmt: skip
        if args[:2] == ("show", "job"):
            self.calls.append(args)
            return "\n".join(f"JobId={j} JobName=train UserId=u(1) JobState=RUNNING Requeue={v['requeue']} "
                             f"NodeList={v['node']} BatchHost={v['node']}" for j, v in self.jobs.items())  # fmt: skip
        if args[:1] == ("requeue",):
            self.jobs.pop(args[1], None)
        if args[:1] == ("update",):
            node = self.fleet[args[1].removeprefix("NodeName=")]
            settings = dict(a.split("=", 1) for a in args[2:])
            if settings.get("State") == "DRAIN":
                node["drain"], node["reason"] = True, settings.get("Reason", "")
            elif settings.get("State") == "RESUME":
                node["drain"], node["reason"] = False, ""
        self.listing = {name: self._line(name, n) for name, n in self.fleet.items()}
        return super().call(*args, max_bytes=max_bytes)

    def _line(self, name: str, n: dict[str, Any]) -> str:
        busy = any(j["node"] == name for j in self.jobs.values())
        state = ("ALLOCATED" if busy else "IDLE") + ("+DRAIN" if n["drain"] else "")
        reason = f" Reason={n['reason']} [root@2026-12-07T10:00:00]" if n["reason"] else ""
        return (f"Arch=x86_64 AvailableFeatures={n['features']} ActiveFeatures={n['features']} NodeHostName={name} "
                f"State={state} Partitions=gpu{reason}")

    def boot(self, name: str, version: str, verdict: str = "") -> None:
        """The VM boots the new model: registers under its name, drained awaiting burn-in; then the burn-in resumes
        it ("") or drains it with `verdict`."""
        node = self.fleet[name]
        node["features"] = f"island-gpu,{BOOT_VERSION_FEATURE_PREFIX}{version}"
        node["drain"], node["reason"] = True, AWAITING_BURNIN_REASON
        if verdict != "awaiting":
            node["drain"], node["reason"] = bool(verdict), verdict

    def state(self, name: str) -> tuple[bool, str]:
        return self.fleet[name]["drain"], self.fleet[name]["reason"]


@pytest.fixture
def roll_world(azure: tuple[FakeScaleSet, str], tmp_path: Path) -> tuple[engine.Context, FakeScaleSet, SlurmWorld]:
    fake, endpoint = azure
    slurm = SlurmWorld()
    for _ in range(5):
        iid = fake.add()
        fake.stale.add(iid)
        slurm.fleet[fake.instances[iid]] = {"drain": False, "reason": "",
                                            "features": f"island-gpu,{BOOT_VERSION_FEATURE_PREFIX}{OLD}"}  # fmt: skip
    fake.capacity = 5
    fake.tags = {TAG_BOOT_VERSION: NEW, TAG_SLURM_RELEASE: "24.11.1"}
    clock = [1_800_000_000.0]
    ctx = engine.Context(
        state_dir=tmp_path / "roll",
        scale_set=lambda island, name: ScaleSetApi("sub", "rg", name, lambda: "token", endpoint=endpoint),
        scontrol=slurm, slurmdbd_version=lambda: "slurm 24.11.1\n", now=lambda: clock[0], return_timeout_s=600,
        echo=lambda line: None,
    )  # fmt: skip
    ctx.clock = clock  # type: ignore[attr-defined]
    return ctx, fake, slurm


def names(fake: FakeScaleSet) -> list[str]:
    return [fake.instances[i] for i in sorted(fake.instances, key=int)]


def reimaged(fake: FakeScaleSet) -> list[str]:
    return [fake.instances[i] for ids in fake.posts("reimage") for i in ids]


def test_a_batch_is_drained_waited_on_while_its_job_runs_and_reimaged_only_once_idle(roll_world: Any) -> None:
    ctx, fake, slurm = roll_world
    first = names(fake)[0]
    slurm.jobs["7"] = {"node": first, "requeue": "1"}
    roll_id = engine.start(ctx, "gpu", SCALE_SET, engine.Options(batch="1")).roll_id
    engine.step(ctx, "gpu")
    assert slurm.state(first) == (True, ROLL_REASON_PREFIX + roll_id)
    for _ in range(3):  # the job runs: never reimaged, never requeued (no deadline)
        engine.step(ctx, "gpu")
    assert (fake.posts("manualupgrade"), reimaged(fake), "7" in slurm.jobs) == ([], [], True)
    del slurm.jobs["7"]  # the job ends
    engine.step(ctx, "gpu")  # manualupgrade
    engine.step(ctx, "gpu")  # reimage
    assert (fake.posts("manualupgrade"), reimaged(fake)) == ([["0"]], [first])
    slurm.boot(first, NEW)
    engine.step(ctx, "gpu")  # the reimage's operation succeeded: returning
    roll = engine.step(ctx, "gpu")  # back: done; the gate passes; the next batch is drained
    assert roll is not None and roll.rolled == [first] and list(roll.current) == [names(fake)[1]]
    assert ("requeue", "7") not in slurm.calls


def test_past_the_deadline_only_requeueable_jobs_are_requeued_and_only_with_requeue(roll_world: Any) -> None:
    ctx, fake, slurm = roll_world
    a, b = names(fake)[:2]
    slurm.jobs |= {"7": {"node": a, "requeue": "1"}, "8": {"node": b, "requeue": "0"}}
    engine.start(ctx, "gpu", SCALE_SET, engine.Options(batch="2", deadline_s=60, requeue=True))
    engine.step(ctx, "gpu")
    ctx.clock[0] += 61
    engine.step(ctx, "gpu")
    assert ("requeue", "7") in slurm.calls and ("requeue", "8") not in slurm.calls and "8" in slurm.jobs


def test_a_bound_the_island_cannot_keep_is_refused_at_start_with_the_figures(roll_world: Any) -> None:
    ctx, _, _ = roll_world
    with pytest.raises(engine.RollRefused, match="5 nodes in service for jobs"):
        engine.start(ctx, "gpu", SCALE_SET, engine.Options(min_available=5))
    assert not rs.state_path(ctx.state_dir, "gpu").exists()


def test_a_warm_spare_is_rolled_first_and_costs_no_capacity(roll_world: Any) -> None:
    ctx, fake, slurm = roll_world
    spare = names(fake)[3]
    slurm.spares = spare
    engine.start(ctx, "gpu", SCALE_SET, engine.Options(min_available=5, batch="2"))  # the spare alone may go
    roll = engine.step(ctx, "gpu")
    assert roll is not None and list(roll.current) == [spare]


def test_the_gate_stops_after_a_failing_batch_names_the_checks_and_leaves_the_rest(roll_world: Any) -> None:
    ctx, fake, slurm = roll_world
    fake.on_reimage.append(lambda ids: [slurm.boot(fake.instances[i], NEW, "ndfleet:gpu.ecc,nccl.allreduce")
                                        for i in ids])  # fmt: skip
    engine.start(ctx, "gpu", SCALE_SET, engine.Options(batch="2"))
    for _ in range(6):
        roll = engine.step(ctx, "gpu")
    assert roll is not None and roll.status == "stopped"
    first_two = names(fake)[:2]
    assert roll.failed == {n: ["gpu.ecc", "nccl.allreduce"] for n in first_two}
    assert "gpu.ecc" in roll.why and first_two[0] in roll.why
    assert reimaged(fake) == first_two  # one batch, not the island
    assert all(slurm.state(n) == (False, "") for n in names(fake)[2:])


def test_after_the_operator_reverts_the_failed_nodes_are_rolled_back_first(roll_world: Any) -> None:
    ctx, fake, slurm = roll_world
    fake.on_reimage.append(lambda ids: [slurm.boot(fake.instances[i], NEW, "ndfleet:gpu.ecc") for i in ids])
    engine.start(ctx, "gpu", SCALE_SET, engine.Options(batch="1"))
    for _ in range(6):
        stopped = engine.step(ctx, "gpu")
    assert stopped is not None and stopped.status == "stopped"
    bad = names(fake)[0]
    fake.tags[TAG_BOOT_VERSION] = OLD  # git revert + pulumi up: the model is the old one again
    fake.on_reimage[:] = [lambda ids: [slurm.boot(fake.instances[i], OLD) for i in ids]]
    fake.stale.add("0")
    roll = engine.step(ctx, "gpu")
    assert roll is not None and roll.status == "running" and list(roll.current) == [bad]


def test_the_roll_survives_a_restart_a_new_process_goes_on_from_disk(roll_world: Any) -> None:
    ctx, fake, slurm = roll_world
    engine.start(ctx, "gpu", SCALE_SET, engine.Options(batch="1"))
    engine.step(ctx, "gpu")  # drained
    engine.step(ctx, "gpu")  # manualupgrade asked
    # A controller restart: nothing but the state disk is left; a new context (a new process) takes over.
    fresh = engine.Context(state_dir=ctx.state_dir, scale_set=ctx.scale_set, scontrol=slurm,
                           slurmdbd_version=ctx.slurmdbd_version, now=ctx.now, echo=lambda line: None)  # fmt: skip
    engine.step(fresh, "gpu")
    assert reimaged(fake) == [names(fake)[0]] and len(fake.posts("manualupgrade")) == 1


def test_a_target_slurm_release_newer_than_slurmctld_or_slurmdbd_is_refused(roll_world: Any) -> None:
    ctx, fake, slurm = roll_world
    fake.tags[TAG_SLURM_RELEASE] = "25.05.0"
    with pytest.raises(engine.RollRefused, match="newer than slurmctld") as refused:
        engine.start(ctx, "gpu", SCALE_SET, engine.Options())
    assert "slurmdbd" in str(refused.value)
    slurm.ctld = "slurm 25.05.2"  # slurmctld upgraded, slurmdbd not yet
    with pytest.raises(engine.RollRefused, match=r"newer than slurmdbd") as refused:
        engine.start(ctx, "gpu", SCALE_SET, engine.Options())
    assert "newer than slurmctld" not in str(refused.value)
    assert not rs.state_path(ctx.state_dir, "gpu").exists()


def test_slurm_order_an_unreadable_version_is_a_refusal() -> None:
    assert engine.check_slurm_order("24.11.1", "slurm 24.11.1", "garbage") != []
    assert engine.check_slurm_order("24.11", "slurm 24.11.3", "slurm 24.11.3") == []
