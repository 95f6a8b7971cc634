"""`ndfleet-node roll start|status|pause|resume|abort|step` on the Slurm controller (`python3 -m ndfleet_node.roll.cli`
there: the controller runs the node program's modules from its library). `step` is one pass, what the controller's
ndfleet-roll timer runs for every island with a roll on disk (docs/upgrades.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ndfleet_node.elastic.arm import ScaleSetApi
from ndfleet_node.elastic.context import IslandSettings, azure_scale_sets
from ndfleet_node.elastic.context import Settings as ElasticSettings
from ndfleet_node.impact import IMDS, ImpactError
from ndfleet_node.roll import engine
from ndfleet_node.roll import state as rs
from ndfleet_node.runner import run_tool
from ndfleet_node.scontrol import Scontrol
from ndfleet_node.text import decode

MAX_CONFIG_BYTES = 256 * 1024
DEFAULT_CONFIG = Path("/etc/ndfleet/roll.json")


def load_config(path: Path) -> dict[str, Any]:
    """/etc/ndfleet/roll.json (ndfleet/slurm/roll.py): the state folder, each island's scale set where the stack
    names it, the endpoints."""
    with path.open("rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{path}: over {MAX_CONFIG_BYTES} bytes")
    doc = json.loads(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("state_dir"), str) or not isinstance(
            doc.get("islands", {}), dict):  # fmt: skip
        raise ValueError(f"{path}: needs state_dir (a path) and islands (an object)")
    return doc


def _slurmdbd_version() -> str:
    result = run_tool(["slurmdbd", "-V"], 30, max_output_bytes=4096)
    return decode(result.stdout) if result.ok else f"(slurmdbd -V failed: {result.error[:200]})"


def context(config: dict[str, Any]) -> engine.Context:
    settings = ElasticSettings(islands={}, state_dir=Path(config["state_dir"]),
                               arm_endpoint=str(config.get("arm_endpoint", "https://management.azure.com")),
                               imds_endpoint=str(config.get("imds_endpoint", IMDS)))  # fmt: skip
    apis: dict[str, Any] = {}

    def scale_set(island: str, name: str) -> ScaleSetApi:
        if "make" not in apis:
            apis["make"] = azure_scale_sets(settings)
        api: ScaleSetApi = apis["make"](IslandSettings(island, name, 0, 0))
        return api

    return engine.Context(
        state_dir=Path(config["state_dir"]), scale_set=scale_set,
        scontrol=Scontrol(tuple(config.get("scontrol", ("scontrol",))), float(config.get("scontrol_timeout_s", 30))),
        slurmdbd_version=_slurmdbd_version, now=time.time,
        return_timeout_s=float(config.get("return_timeout_s", engine.DEFAULT_RETURN_TIMEOUT_S)),
    )  # fmt: skip


def _percent(text: str) -> float:
    value = float(text.rstrip("%"))
    if not 0 <= value <= 100:
        raise ValueError
    return value


def run(args: argparse.Namespace, ctx: engine.Context | None = None, config: dict[str, Any] | None = None) -> int:
    try:
        config = config if config is not None else load_config(args.config)
        ctx = ctx or context(config)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"ndfleet-roll: cannot read {args.config}: {exc}", file=sys.stderr)
        return 2
    islands = [args.island] if getattr(args, "island", None) else sorted(
        p.stem for p in ctx.state_dir.glob("*.json")) if ctx.state_dir.is_dir() else []  # fmt: skip
    try:
        if args.roll_command == "start":
            return _start(ctx, config, args)
        code = 0
        for island in islands:
            if args.roll_command == "step":
                roll = engine.step(ctx, island)
                code = max(code, 1 if roll is not None and roll.status == "stopped" else 0)
            elif args.roll_command == "status":
                roll = rs.load(rs.state_path(ctx.state_dir, island))
                print("\n".join(engine.describe(roll)) if roll else f"no roll of island {island}")
            else:
                status = {"pause": "paused", "resume": "running", "abort": "aborted"}[args.roll_command]
                print(next(iter(engine.describe(engine.set_status(ctx, island, status)))))
        return code
    except engine.RollRefused as exc:
        print(f"ndfleet-roll: refused: {exc}", file=sys.stderr)
        return 2
    except (*engine.FAILURES, ImpactError) as exc:
        print(f"ndfleet-roll: {exc}", file=sys.stderr)
        return 1


def _start(ctx: engine.Context, config: dict[str, Any], args: argparse.Namespace) -> int:
    problems = []
    scale_set = args.scale_set or str(config.get("islands", {}).get(args.island, {}).get("scaleSet", ""))
    if not scale_set:
        problems.append(f"--scale-set: island {args.island!r} has no scale set in {args.config}; name it")
    try:
        batch = engine.parse_batch(args.batch)
    except ValueError as exc:
        problems.append(str(exc))
    checks = (("--max-failed", args.max_failed, _percent), ("--pause", args.pause, engine.parse_duration),
              ("--deadline", args.deadline, engine.parse_duration))  # fmt: skip
    values: dict[str, float | None] = {}
    for flag, text, parse in checks:
        try:
            values[flag] = parse(text) if text is not None else None
        except ValueError:
            problems.append(f"{flag} {text!r}: " + ("a percentage, 0 to 100" if flag == "--max-failed" else
                                                    "seconds, or a number with s, m, h or d"))  # fmt: skip
    if args.min_available < 0:
        problems.append(f"--min-available {args.min_available}: a node count, 0 or more")
    if args.requeue and args.deadline is None:
        problems.append("--requeue: only with --deadline (jobs are requeued after it)")
    if problems:
        print("ndfleet-roll: " + "; ".join(problems), file=sys.stderr)
        return 2
    max_failed = values["--max-failed"]
    options = engine.Options(batch=batch, max_failed_pct=engine.DEFAULT_MAX_FAILED_PCT if max_failed is None
                             else max_failed, pause_s=values["--pause"] or 0.0, min_available=args.min_available,
                             deadline_s=values["--deadline"], requeue=args.requeue)  # fmt: skip
    roll = engine.start(ctx, args.island, scale_set, options, dry_run=args.dry_run)
    print("\n".join(engine.describe(roll)))
    if args.dry_run:
        isl = engine.read_island(ctx, args.island, scale_set)
        print(f"  would roll, in this order: {', '.join(engine.plan(roll, isl)) or 'nothing'}; first batch: "
              f"{', '.join(engine.choose_batch(roll, isl)) or 'none now'}")  # fmt: skip
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    sub = parser.add_subparsers(dest="roll_command", metavar="ACTION", required=True)
    start = sub.add_parser("start", help="start a roll of one island to its scale set's latest model")
    start.add_argument("--island", required=True)
    start.add_argument("--scale-set", default="", help="the island's scale set (default: from the config)")
    start.add_argument("--batch", default="1", help="nodes per batch: N, or P%% of the island (default 1)")
    start.add_argument("--max-failed", default=None,
                       help=f"stop when more than P%% of a batch fails (default {engine.DEFAULT_MAX_FAILED_PCT:g})")
    start.add_argument("--pause", default=None, help="wait between batches (seconds, or 90s, 5m, 1h)")
    start.add_argument("--min-available", type=int, default=0, help="never fewer nodes in service for jobs")
    start.add_argument("--deadline", default=None, help="after a node's drain: requeue its jobs (with --requeue)")
    start.add_argument("--requeue", action="store_true", help="past --deadline, requeue jobs that allow it")
    start.add_argument("--dry-run", action="store_true", help="check and show the order; change nothing")
    for action, what in (("status", "show the rolls"), ("pause", "finish the batch under way, start no other"),
                         ("resume", "go on after a pause or a stop"), ("abort", "stop; resume nodes not reimaged"),
                         ("step", "one pass (the controller's timer)")):  # fmt: skip
        sub.add_parser(action, help=what).add_argument("--island", default=None)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("roll", help="roll an island to its scale set's latest model (controller)")
    add_arguments(parser)
    parser.set_defaults(handler=run)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ndfleet-roll")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
