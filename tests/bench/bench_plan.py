"""Benchmark (not part of the test run): wall time and peak RSS of `ndfleet plan` at 2, 100 and 1,280 nodes.

Each size runs in a fresh process, as a user runs the command: `python tests/bench/bench_plan.py [--runs N]`.
Prints one line per size: nodes, islands, GPUs, best and median wall seconds, peak RSS in MB.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SIZES = (2, 100, 1280)


def stack_file(nodes: int, directory: Path) -> Path:
    doc = yaml.safe_load((REPO / "stacks" / "Pulumi.dev.yaml").read_text())
    doc["config"]["ndfleet:nodes"] = nodes
    path = directory / f"Pulumi.bench{nodes}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def measure(path: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one `ndfleet plan --format json` in a child process."""
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run(
        [sys.executable, "-m", "ndfleet.cli", "plan", "--stack-file", str(path), "--format", "json"],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    # ru_maxrss of children is the maximum over all children so far (KiB on Linux); sizes run small to large.
    peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return wall, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{'nodes':>6} {'islands':>7} {'GPUs':>6} {'best s':>7} {'median s':>8} {'peak MB':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in SIZES:
            path = stack_file(nodes, Path(tmp))
            runs = [measure(path) for _ in range(args.runs)]
            walls = [w for w, _ in runs]
            islands = -(-nodes // 100)
            print(
                f"{nodes:>6} {islands:>7} {nodes * 8:>6} {min(walls):>7.2f} {statistics.median(walls):>8.2f} "
                f"{max(p for _, p in runs):>8.0f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
