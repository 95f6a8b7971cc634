"""Benchmark (not part of the test run): wall time of `ndfleet --help` and `ndfleet plan --help`, each in a fresh
process as a user runs them: `python tests/bench/bench_cli_startup.py [--runs N]`.

Prints one line per command: best and median wall seconds over N runs. The parser loads only the command
modules (ndfleet/cli.py); before they imported Pulumi and the Azure SDK eagerly, `--help` took about 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMANDS = (("--help",), ("plan", "--help"), ("--version",))


def measure(argv: tuple[str, ...]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ndfleet.cli", *argv], cwd=REPO, check=True, stdout=subprocess.DEVNULL,
                   timeout=120)  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    for argv in COMMANDS:
        times = [measure(argv) for _ in range(runs)]
        print(f"ndfleet {' '.join(argv):<14} best {min(times):.3f} s  median {statistics.median(times):.3f} s")


if __name__ == "__main__":
    main()
