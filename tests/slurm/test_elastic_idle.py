"""An elastic island whose idleMinutes is shorter than a new node's resume-to-burn-in time is refused before anything
is deployed (docs/elastic.md): Slurm counts a resumed node's idle time from the job's requeue at the resume, so it
would release the node before its burn-in ended, and the resume would start over without the job ever running."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ndfleet.nodefiles.bootstrap import validation_budget_s
from ndfleet.prepare import PrepareError, default_probe_grace_period_s, prepare
from ndfleet.slurm.conf import BURNIN_EVERY_S
from ndfleet.slurm.elastic import burnin_s, resume_to_burnin_s
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config


def spec_with(level: str = "full", **elastic: Any) -> ClusterSpec:
    islands = [{"name": "gpu", "nodes": 2}, {"name": "burst", "elastic": {"maxNodes": 8, **elastic}}]
    return load_spec(base_config(nodes=None, islands=islands, scheduler="slurm", health={"validationLevel": level}),
                     "idle")  # fmt: skip


def least_idle_minutes(spec: ClusterSpec) -> int:
    burst = spec.islands[1]
    return math.floor(resume_to_burnin_s(spec, burst, default_probe_grace_period_s(validation_budget_s(spec))) / 60) + 1


def test_the_bound_is_registration_the_burnin_timer_and_the_burnin() -> None:
    spec = spec_with(resumeTimeoutMinutes=240)  # registration: the worst-case boot, set-up and validation
    grace = default_probe_grace_period_s(validation_budget_s(spec))
    assert resume_to_burnin_s(spec, spec.islands[1], grace) == grace + BURNIN_EVERY_S + burnin_s(spec, 8)
    short = spec_with(resumeTimeoutMinutes=5)  # a node later than resumeTimeoutMinutes is given up
    assert resume_to_burnin_s(short, short.islands[1], grace) == 300 + BURNIN_EVERY_S + burnin_s(spec, 8)
    assert burnin_s(spec, 100) > burnin_s(spec, 8) > 0  # the island-wide test grows with the island


def test_an_idle_time_shorter_than_resume_to_burnin_is_refused_naming_the_setting_and_the_least_valid_value() -> None:
    least = least_idle_minutes(spec_with())
    with pytest.raises(PrepareError) as refused:
        prepare(spec_with(idleMinutes=least - 1))
    message = str(refused.value)
    assert f"ndfleet:islands[1].elastic.idleMinutes = {least - 1}: shorter than a new node of 'burst'" in message
    assert f"set idleMinutes to {least} or more (or validationLevel 'quick')" in message
    prepare(spec_with(idleMinutes=least))


def test_a_short_resume_timeout_is_named_when_it_bounds_the_registration() -> None:
    least = least_idle_minutes(spec_with(resumeTimeoutMinutes=5))
    with pytest.raises(PrepareError, match=rf"registration 300 s \(resumeTimeoutMinutes 5\).*idleMinutes to {least} "
                                           r"or more \(or a shorter resumeTimeoutMinutes\)"):  # fmt: skip
        prepare(spec_with(resumeTimeoutMinutes=5, idleMinutes=least - 1))


def test_the_defaults_are_valid_at_either_validation_level() -> None:
    for level in ("quick", "full"):
        prepare(spec_with(level))


def test_every_problem_is_reported_at_once() -> None:
    islands = [{"name": n, "elastic": {"maxNodes": 2, "idleMinutes": 1}} for n in ("a", "b")]
    spec = load_spec(base_config(nodes=None, islands=islands, scheduler="slurm"), "idle")
    with pytest.raises(PrepareError) as refused:
        prepare(spec)
    assert [p.split(":")[1].split(" ")[0] for p in refused.value.problems] == [
        "islands[0].elastic.idleMinutes", "islands[1].elastic.idleMinutes"]  # fmt: skip


def test_a_one_node_elastic_island_is_still_refused() -> None:
    from ndfleet.stackconfig.problems import SpecError

    with pytest.raises(SpecError, match=r"elastic.maxNodes = 1: with Slurm an island's nodes take jobs only once"):
        load_spec(base_config(nodes=None, islands=[{"name": "a", "elastic": {"maxNodes": 1}}], scheduler="slurm"), "x")
