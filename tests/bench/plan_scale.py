"""Benchmark (not part of the test run): the 103-island plan against the dev stack, wall time and peak RSS.

Issue 30's target: a plan of 10,240 nodes in islands of 100 (103 islands, the dev stack otherwise) within 2x the
dev stack's wall time and under 250 MiB peak RSS. Each stack runs in a fresh `ndfleet plan --format json` process,
as a user runs it: `python tests/bench/plan_scale.py [--runs N]`. Prints one line per stack (best and median wall
seconds, peak RSS in MiB) and the ratio of the best walls; exits 1 when a figure misses its target, so a run in a
terminal says so (it is not a timed test: wall time depends on the machine).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
NODES = 10_240
ISLAND = 100
MAX_RATIO = 2.0
MAX_RSS_MIB = 250.0


def stack_file(directory: Path, nodes: int | None) -> Path:
    """The dev stack, or a copy of it with `nodes` split into islands of `ISLAND`."""
    if nodes is None:
        return REPO / "stacks" / "Pulumi.dev.yaml"
    doc = yaml.safe_load((REPO / "stacks" / "Pulumi.dev.yaml").read_text())
    doc["config"]["ndfleet:nodes"] = nodes
    doc["config"]["ndfleet:maxNodesPerIsland"] = ISLAND
    path = directory / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def measure(path: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one `ndfleet plan --format json` in a child process of its own."""
    # A child of a child: RUSAGE_CHILDREN's ru_maxrss is the largest child so far, so each run gets a fresh parent.
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    cmd = [sys.executable, "-m", "ndfleet.cli", "plan", "--stack-file", str(path), "--format", "json"]
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *cmd], cwd=REPO, check=True, capture_output=True, text=True)
    fields = out.stdout.split()
    if len(fields) != 2:
        raise SystemExit(f"plan_scale: cannot read the child's figures from {out.stdout[:200]!r}")
    wall, rss_kib = float(fields[0]), int(fields[1])
    if not 0 < wall <= time.perf_counter() - start or rss_kib <= 0:
        raise SystemExit(f"plan_scale: implausible figures wall={wall} rss_kib={rss_kib}")
    return wall, rss_kib / 1024  # ru_maxrss is KiB on Linux (getrusage(2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    best: dict[str, float] = {}
    rss: dict[str, float] = {}
    print(f"{'stack':>12} {'best s':>7} {'median s':>8} {'peak MiB':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, nodes in (("dev", None), (f"{NODES} nodes", NODES)):
            path = stack_file(Path(tmp), nodes)
            runs = [measure(path) for _ in range(args.runs)]
            walls = [w for w, _ in runs]
            best[label], rss[label] = min(walls), max(p for _, p in runs)
            print(f"{label:>12} {best[label]:>7.2f} {statistics.median(walls):>8.2f} {rss[label]:>8.0f}")
    ratio = best[f"{NODES} nodes"] / best["dev"]
    big_rss = rss[f"{NODES} nodes"]
    print(f"ratio {ratio:.2f} (target <= {MAX_RATIO}), peak {big_rss:.0f} MiB (target < {MAX_RSS_MIB:.0f})")
    return 0 if ratio <= MAX_RATIO and big_rss < MAX_RSS_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
