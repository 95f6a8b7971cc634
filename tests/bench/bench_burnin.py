"""Simulation benchmark of the burn-in: rounds and modelled wall time against plain bisection.

    .venv/bin/python tests/bench/bench_burnin.py [--seeds 20] [--fakes] [--fixed-timeouts] [--hostfile]

For islands of 16, 100 and 300 ND H100 v5 VMs with 0-5 bad hosts (random positions, `--seeds` draws each), it
runs ndfleet's planner (`ndfleet_node.burnin.planner`) and a plain bisection over the same simulated fleet and
prints a markdown table (the one in docs/burnin.md). Not part of the test run.

Fleet model: a test fails when it includes a bad host; a bad host is a bad HCA (slow with any partner) or, in the
`hang` rows, one host that hangs every test it is in (the test costs its timeout).

Time model, from the profile (`ndfleet.stackconfig.profiles.H100_V5.burnin`): one test takes
`model_test_overhead_s + model_test_overhead_per_node_s x VMs + (warmup + iters) x message / algbw`, with
algbw = busbw x r / (2 (r - 1)) for r ranks (nccl-tests doc/PERFORMANCE.md) at the healthy busbw below; a hung
test takes its timeout, derived as the node derives it (`ndfleet_node.burnin.runner.timeout_for`: the test's
duration at the floor plus the profile's launch allowance); `--fixed-timeouts` uses the fixed timeouts of before
(300 s for a pair, 900 s for a larger group) for the before/after comparison; a round takes its longest test; the
burn-in is the sum of its rounds.

`--hostfile` times reading a 40,000-host hostfile (`ndfleet_node.burnin.hosts.read_hostfile`).

Plain bisection (Azure ai-infrastructure-on-azure's NCCL diagnosis: halve the failing set, test the halves in
parallel, recurse down to 2-3 nodes, then pair the suspects with known-good nodes): round 1 is the island-wide test;
each failing group of 3 or more VMs is halved and both halves are tested in the next round (a 2-VM group against
the pair floor); a failing group of 1-2 VMs is a set of suspects; a last round pairs each suspect with a known-good
VM. A healthy island therefore takes one round.

`--fakes` also times the real `ndfleet-node burnin` against the fake fleet (tests/fakes/fleet) on this machine.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "node")]

from ndfleet_node.burnin.planner import Planner, TestResult, TestSpec  # noqa: E402
from ndfleet_node.burnin.runner import timeout_for  # noqa: E402
from ndfleet_node.burnin.settings import settings_from_section  # noqa: E402

from ndfleet.nodefiles.burnin_node_config import burnin_node_section  # noqa: E402
from ndfleet.stackconfig.profiles import H100_V5  # noqa: E402

B = H100_V5.burnin
GPUS = H100_V5.gpus_per_vm
PAIR_BUSBW = 380.0  # healthy 2-node ring busbw, GB/s (8 x NDR at NCCL's ~46-48 GB/s per rail)
ISLAND_BUSBW = 450.0  # Azure's island-scale figure with SHARP (ai-infrastructure-on-azure NCCL validation)
SLOW_BUSBW = 190.0  # a bad rail halves the ring
SETTINGS = settings_from_section(burnin_node_section(H100_V5))
FIXED_TIMEOUTS = {"pair": 300.0, "group": 900.0}  # before: one fixed quick timeout per test kind
USE_FIXED_TIMEOUTS = False


def hang_cost_s(vms: int) -> float:
    if USE_FIXED_TIMEOUTS:
        return FIXED_TIMEOUTS["pair" if vms == 2 else "group"]
    floor = B.pair_busbw_gbps if vms == 2 else B.island_busbw_gbps
    spec = TestSpec("t", 1, "pairwise" if vms == 2 else "island", tuple(f"h{i}" for i in range(vms)), floor)
    return float(timeout_for(SETTINGS, spec, "quick"))


def test_time_s(vms: int, outcome: str, level: str = "quick") -> float:
    iters = B.iters_quick if level == "quick" else B.iters_full
    if outcome == "hang":
        return hang_cost_s(vms)
    busbw = SLOW_BUSBW if outcome == "slow" else (PAIR_BUSBW if vms == 2 else ISLAND_BUSBW)
    ranks = vms * GPUS
    algbw = busbw * ranks / (2 * (ranks - 1))
    data = (B.warmup_iters + iters) * B.message_bytes / (algbw * 1e9)
    return B.model_test_overhead_s + B.model_test_overhead_per_node_s * vms + data


def outcome_of(hosts: Sequence[str], bad: dict[str, str]) -> str:
    kinds = {bad[h] for h in hosts if h in bad}
    return "hang" if "hang" in kinds else ("slow" if kinds else "pass")


def run_ours(hosts: list[str], bad: dict[str, str]) -> tuple[int, float, set[str]]:
    planner = Planner(hosts, B.pair_busbw_gbps, B.island_busbw_gbps, B.max_rounds)
    wall = 0.0
    while tests := planner.next_round():
        results = []
        for t in tests:
            out = outcome_of(t.hosts, bad)
            results.append(TestResult(t, out, None, 0, "", test_time_s(len(t.hosts), out)))  # type: ignore[arg-type]
        wall += max(r.duration_s for r in results)
        planner.record(results)
    found = {h for h, v in planner.verdicts().items() if v.status == "unhealthy"}
    return planner.round, wall, found


def run_bisection(hosts: list[str], bad: dict[str, str]) -> tuple[int, float, set[str]]:
    rounds, wall = 1, test_time_s(len(hosts), outcome_of(hosts, bad))
    if outcome_of(hosts, bad) == "pass":
        return rounds, wall, set()
    failing, good, suspects = [hosts], set(), []
    while failing:
        groups = []
        for g in failing:
            if len(g) <= 2:
                suspects += g
            else:
                groups += [g[: len(g) // 2], g[len(g) // 2 :]]
        testable = [g for g in groups if len(g) >= 2]
        suspects += [h for g in groups if len(g) == 1 for h in g]
        if not testable:
            break
        rounds += 1
        wall += max(test_time_s(len(g), outcome_of(g, bad)) for g in testable)
        failing = [g for g in testable if outcome_of(g, bad) != "pass"]
        good |= {h for g in testable if outcome_of(g, bad) == "pass" for h in g}
    # Pin: each suspect with a distinct known-good partner, in parallel (more rounds if partners run short).
    partners, found = sorted(good), set()
    pending = list(dict.fromkeys(suspects))
    while pending:
        batch, pending = pending[: max(1, len(partners))], pending[max(1, len(partners)) :]
        rounds += 1
        wall += max(test_time_s(2, outcome_of([s], bad)) for s in batch)
        found |= {s for s in batch if s in bad}
    return rounds, wall, found


def simulate(seeds: int, hang: bool = False) -> list[dict[str, float | int | str]]:
    rows = []
    for n in (16, 100, 300):
        for k in range(0, 6):
            if hang and k == 0:
                continue
            ours_r, ours_t, bis_r, bis_t = [], [], [], []
            for seed in range(seeds):
                rng = random.Random(seed * 1000 + n * 10 + k)
                hosts = [f"h{i:03d}" for i in range(n)]
                picked = rng.sample(hosts, k)
                bad = {h: "slow" for h in picked}
                if hang:
                    bad[picked[0]] = "hang"
                r, t, found = run_ours(hosts, bad)
                assert found == set(bad), (n, k, seed, found, bad)
                ours_r.append(r)
                ours_t.append(t)
                r, t, found = run_bisection(hosts, bad)
                assert found == set(bad), ("bisection", n, k, seed, found, bad)
                bis_r.append(r)
                bis_t.append(t)
            rows.append({
                "hosts": n, "bad": k, "kind": "1 hang + slow" if hang else "slow HCA",
                "ours_rounds": statistics.mean(ours_r), "ours_rounds_max": max(ours_r),
                "ours_min": statistics.mean(ours_t) / 60, "bis_rounds": statistics.mean(bis_r),
                "bis_rounds_max": max(bis_r), "bis_min": statistics.mean(bis_t) / 60,
            })  # fmt: skip
    return rows


def table(rows: list[dict[str, float | int | str]]) -> str:
    out = [
        "| hosts | bad hosts | fault | rounds (ndfleet) | wall, min (ndfleet) | rounds (bisection) | "
        "wall, min (bisection) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['hosts']} | {r['bad']} | {r['kind']} | {r['ours_rounds']:.1f} (max {r['ours_rounds_max']}) | "
            f"{r['ours_min']:.1f} | {r['bis_rounds']:.1f} (max {r['bis_rounds_max']}) | {r['bis_min']:.1f} |"
        )
    return "\n".join(out)


def time_fakes(scenarios: Sequence[tuple[int, int]]) -> list[str]:
    """Wall time of the real command against the fake fleet (fake tests finish at once: this is our overhead)."""
    import contextlib
    import io
    import json
    import os
    import tempfile

    from ndfleet_node.__main__ import main

    from tests.fakes.fleet import FakeFleet, host_names

    lines = ["| hosts | bad (slow HCA) | rounds | wall time on the fakes |", "|---|---|---|---|"]
    for n, k in scenarios:
        with tempfile.TemporaryDirectory() as tmp:
            names = host_names(n)
            fleet = FakeFleet(Path(tmp), names, bad_hca=names[1 : 1 + k])
            os.environ.update(fleet.env())
            start = time.monotonic()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = main(["burnin", "--hostfile", str(fleet.hostfile), "--report", str(fleet.report),
                             "--config", str(fleet.node_json)])  # fmt: skip
            wall = time.monotonic() - start
            report = json.loads(fleet.report.read_text())
            assert set(report["unhealthy"]) == set(names[1 : 1 + k]), report["unhealthy"]
            lines.append(f"| {n} | {k} | {report['rounds_used']} | {wall:.1f} s (exit {code}) |")
    return lines


def time_hostfile(hosts: int = 40_000) -> str:
    import tempfile

    from ndfleet_node.burnin.hosts import read_hostfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hosts"
        path.write_text("\n".join(f"nd-{i:06d}" for i in range(hosts)) + "\n")
        start = time.monotonic()
        read = read_hostfile(path)
        wall = time.monotonic() - start
    assert len(read) == hosts
    return f"read_hostfile: {hosts} hosts in {wall:.3f} s"


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> None:
    global USE_FIXED_TIMEOUTS
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--fakes", action="store_true")
    ap.add_argument("--fixed-timeouts", action="store_true", help="the fixed 300 s / 900 s timeouts of before")
    ap.add_argument("--hostfile", action="store_true", help="time reading a 40,000-host hostfile")
    args = ap.parse_args(argv)
    USE_FIXED_TIMEOUTS = args.fixed_timeouts
    out(f"per-test model: overhead {B.model_test_overhead_s:g} s + {B.model_test_overhead_per_node_s:g} s/VM; "
        f"2-VM test {test_time_s(2, 'pass'):.0f} s, 100-VM {test_time_s(100, 'pass'):.0f} s, "
        f"300-VM {test_time_s(300, 'pass'):.0f} s; hang = timeout ({hang_cost_s(2):g} s pair, "
        f"{hang_cost_s(16):g} / {hang_cost_s(100):g} / {hang_cost_s(300):g} s for 16 / 100 / 300 VMs)\n")  # fmt: skip
    out(table(simulate(args.seeds) + simulate(args.seeds, hang=True)))
    if args.hostfile:
        out("")
        out(time_hostfile())
    if args.fakes:
        out("")
        for line in time_fakes([(16, 0), (16, 3), (100, 0), (100, 5)]):
            out(line)


if __name__ == "__main__":
    main()
