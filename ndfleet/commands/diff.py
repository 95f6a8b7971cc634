"""`ndfleet diff`: what a change does to the cluster, from two offline plans.

    ndfleet diff BASE.json HEAD.json [--format markdown|text] [--stack NAME]
    ndfleet diff --base-dir BASE/ --head-dir HEAD/ [--format markdown|text] [--output FILE]

The second form diffs every `<stack>.json` found in either folder (the preview workflow plans each stack at the
base and head commits into two folders, then makes one comment of all of them); a stack present on one side only
shows as all-added or all-removed. Exit 0 with the diff; exit 2 when an input is missing or not a plan, or when the
two plans are of different stacks (unless --allow-different-stacks).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ndfleet.plans.plandiff import StackDiff


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "diff",
        help="compare two offline plans (ndfleet plan --format json) and flag dangerous changes",
        description="Compare two `ndfleet plan --format json` outputs: resources added, removed and changed, with "
        "the consequences of each change (replacements, reimages, InfiniBand, capacity, data). Give two files, or "
        "--base-dir and --head-dir holding <stack>.json plans.",
    )
    p.add_argument("base", nargs="?", help="plan JSON of the base (before the change)")
    p.add_argument("head", nargs="?", help="plan JSON of the head (after the change)")
    p.add_argument("--base-dir", help="folder of <stack>.json plans at the base")
    p.add_argument("--head-dir", help="folder of <stack>.json plans at the head")
    p.add_argument("--format", choices=("markdown", "text"), default="text", help="output format (default: text)")
    p.add_argument("--stack", help="stack name to show for two files (default: the plans' own 'stack')")
    p.add_argument("--title", default="", help="markdown heading (default: 'ndfleet plan diff')")
    p.add_argument("--output", "-o", help="write the diff to this file instead of standard output")
    p.add_argument(
        "--allow-different-stacks", action="store_true",
        help="diff two plans of different stacks (without it, plans whose 'stack' differs are refused, exit 2)",
    )  # fmt: skip
    p.set_defaults(handler=_run)


def compute(args: argparse.Namespace) -> list[StackDiff]:
    from ndfleet.plans import plandiff
    from ndfleet.plans.planfiles import InputError, load_plan, load_plan_dir
    from ndfleet.stackconfig.names import stack_name_problem

    files = args.base is not None or args.head is not None
    dirs = args.base_dir is not None or args.head_dir is not None
    if files and dirs:
        raise InputError("give either BASE.json HEAD.json or --base-dir/--head-dir, not both")
    if dirs:
        if args.base_dir is None or args.head_dir is None:
            raise InputError("--base-dir and --head-dir go together")
        bases, heads = load_plan_dir(Path(args.base_dir)), load_plan_dir(Path(args.head_dir))
        if not bases and not heads:
            raise InputError(f"no <stack>.json plans in {args.base_dir} or {args.head_dir}")
        if not args.allow_different_stacks:
            problems = [
                different_stacks(bases[s], heads[s], f"{args.base_dir}/{s}.json", f"{args.head_dir}/{s}.json")
                for s in sorted(set(bases) & set(heads))
            ]
            if any(problems):
                raise InputError("\n".join(p for p in problems if p))
        return plandiff.diff_stacks(bases, heads)
    if args.stack is not None and stack_name_problem(args.stack) is not None:
        raise InputError(f"--stack: {stack_name_problem(args.stack)}")
    if args.base is None or args.head is None:
        raise InputError("give two plan files (BASE.json HEAD.json), or --base-dir and --head-dir")
    base, head = load_plan(Path(args.base)), load_plan(Path(args.head))
    problem = None if args.allow_different_stacks else different_stacks(base, head, args.base, args.head)
    if problem is not None:
        raise InputError(problem)
    return [plandiff.diff_plans(base, head, args.stack)]


def different_stacks(base: dict[str, Any], head: dict[str, Any], base_name: str, head_name: str) -> str | None:
    """Why two plans are not two states of one stack, or None. Different stacks share no resource names, so their
    diff would read as every resource deleted and created again; plandoc has checked that `stack` is a valid name."""
    old, new = base.get("stack"), head.get("stack")
    if old is None or new is None or old == new:
        return None
    return (f"{base_name} is a plan of stack {old!r} and {head_name} of stack {new!r}: a diff of two stacks shows "
            "every resource of one deleted and every resource of the other created. Plan both sides from the same "
            "stack, or pass --allow-different-stacks to compare them anyway")


def _run(args: argparse.Namespace) -> int:
    # Imported here, for the chosen command only: `ndfleet --help` stays fast.
    from ndfleet.plans import plandiff
    from ndfleet.plans.planfiles import InputError

    try:
        diffs = compute(args)
    except InputError as e:
        print(f"ndfleet diff: {e}", file=sys.stderr)
        return 2
    out = plandiff.render_markdown(diffs, title=args.title) if args.format == "markdown" else \
        plandiff.render_text(diffs)
    if args.output:
        try:
            Path(args.output).write_text(out, encoding="utf-8")
        except OSError as e:
            print(f"ndfleet diff: cannot write {args.output}: {e}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(out)
    return 0
