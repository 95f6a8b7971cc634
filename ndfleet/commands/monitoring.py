"""`ndfleet monitoring`: write a stack's alert rules and Grafana dashboards as files, for review and import.

  ndfleet monitoring --stack NAME --out DIR        (stacks/Pulumi.NAME.yaml)
  ndfleet monitoring --stack-file PATH --out DIR

Writes `alerts.rules.yml` (the Prometheus rule file the stack's PrometheusRuleGroup resources carry; check it with
`promtool check rules`) and `dashboards/*.json` (import each into the stack's Managed Grafana with
`az grafana dashboard import`, docs/monitoring.md). Exit 2 with the configuration's message when the stack is
invalid or has monitoring off (docs/cli.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ndfleet.cliconvention import EXIT_OK, fail
from ndfleet.commands.stackargs import add_stack_arguments, load_stack_from_args

RULES_FILE = "alerts.rules.yml"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "monitoring",
        help="write a stack's alert rules and Grafana dashboards as files",
        description="Write the alert rule file and the Grafana dashboards of a stack with monitoring on.",
    )
    add_stack_arguments(p)
    p.add_argument("--out", metavar="DIR", required=True, help="folder to write into (created if missing)")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    # Imported here, for the chosen command only: `ndfleet --help` stays fast.
    from ndfleet.monitoring.alerts import alerts, rule_file_yaml
    from ndfleet.monitoring.budget import budget
    from ndfleet.monitoring.dashboards import dashboard_files
    from ndfleet.stackconfig.config import load_spec
    from ndfleet.stackconfig.problems import SpecError
    from ndfleet.stackconfig.stackfile import StackFileError

    try:
        stack = load_stack_from_args(args)
        spec = load_spec(stack.ndfleet_config, stack.name)
    except (StackFileError, SpecError) as e:
        return fail(args, str(e))
    if not spec.monitoring.enabled:
        return fail(
            args,
            f"stack {spec.stack!r} has ndfleet:monitoring.enabled = false; set it to true (docs/monitoring.md)",
        )
    out = Path(args.out)
    try:
        (out / "dashboards").mkdir(parents=True, exist_ok=True)
        (out / RULES_FILE).write_text(rule_file_yaml(spec))
        files = dashboard_files(spec)
        for name, text in files.items():
            (out / "dashboards" / name).write_text(text)
    except OSError as e:
        return fail(args, f"cannot write to {out}: {e}")
    print(f"{out / RULES_FILE}: {len(alerts(spec))} alert rules")
    print(f"{out / 'dashboards'}/: {', '.join(sorted(files))}")
    # The figures `ndfleet plan` prints (budget.plan_lines): the nodes' series and the Slurm controller's.
    b = budget(spec)
    print(
        f"about {b.series_per_node:,} series per node, {b.events_per_minute:,.0f} samples/min for {b.nodes:,} nodes"
        + (" and the Slurm controller" if b.controller_series else "")
        + " (docs/monitoring.md, series budget)"
    )
    return EXIT_OK
