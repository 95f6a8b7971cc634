"""Benchmark (not part of the test run): the share of health probes answered under a local connection flood.

Starts `ndfleet-node health` on 127.0.0.1 and runs tests/node/health_flood.py's flood (clients opening and holding
connections in a loop, far past the endpoint's connection cap) while probes are sent one after another:

    .venv/bin/python tests/bench/bench_health_flood.py [--runs N] [--probes N] [--processes N] [--hold N]

Prints, per run, the probes answered, the rate and the connections the flood opened.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.node.health_flood import Flood, burst_while_busy, health_server, measure  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--processes", type=int, default=Flood.processes)
    parser.add_argument("--hold", type=int, default=Flood.hold)
    parser.add_argument("--burst", type=int, default=600, help="connections arriving behind a probe while busy")
    parser.add_argument("--burst-rounds", type=int, default=20)
    args = parser.parse_args()
    flood = Flood(processes=args.processes, hold=args.hold, probes=args.probes)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "report.json").write_text(json.dumps({"status": "healthy", "checks": []}))
        total = answered = burst_total = burst_answered = 0
        for run in range(1, args.runs + 1):
            with health_server(Path(folder)) as server:
                result = measure(server.port, flood)
                burst = burst_while_busy(server, args.burst, args.burst_rounds)
            total, answered = total + result.probes, answered + result.answered
            burst_total, burst_answered = burst_total + burst.probes, burst_answered + burst.answered
            print(f"run {run}: flood {result.answered}/{result.probes} probes answered ({result.rate:.1%}), "
                  f"{result.connections_opened} flood connections; burst of {args.burst} while busy "
                  f"{burst.answered}/{burst.probes} ({burst.rate:.1%}); first failures: "
                  f"{list((result.failures + burst.failures)[:3])}", flush=True)  # fmt: skip
        print(f"all runs: flood {answered}/{total} answered ({answered / total:.1%}); burst while busy "
              f"{burst_answered}/{burst_total} ({burst_answered / burst_total:.1%})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
