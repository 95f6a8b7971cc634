"""`ndfleet diff`: what a change does to the cluster, from two offline plans.

    ndfleet diff BASE.json HEAD.json [--format table|markdown] [--stack-name NAME] [--fail-on danger|warning|policy]
    ndfleet diff --base-dir BASE/ --head-dir HEAD/ [--format table|markdown] [--out FILE]

The second form diffs every `<stack>.json` found in either folder (the preview workflow plans each stack at the
base and head commits into two folders, then makes one comment of all of them); a stack present on one side only
shows as all-added or all-removed. Exit 0 with the diff; 1 with `--fail-on` when the change has what it names (a danger
consequence; a warning or danger one; a head plan that breaks a mandatory policy rule), the diff printed all the same;
exit 2 when an input is missing or not a plan, or when the
two plans are of different stacks (unless --allow-different-stacks); 64 when the arguments do not go together
(docs/cli.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ndfleet.cliconvention import EXIT_CANNOT_RUN, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UsageError, fail

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ndfleet.plans.plandiff import StackDiff

# What `--fail-on` can stop a change for: its consequences at a severity (warning takes danger in too), or a head plan
# that breaks a mandatory policy rule (the rules `ndfleet policy` and `plan --policies` check).
FAIL_ON = ("danger", "warning", "policy")


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
    p.add_argument("--format", choices=("table", "markdown"), default="table", type=_format_name,
                   help="output format (default: table, plain text; `text` is its former name)")
    p.add_argument("--stack-name", metavar="NAME",
                   help="stack name to show for two files (default: the plans' own 'stack')")
    p.add_argument("--title", default="", help="markdown heading (default: 'ndfleet plan diff')")
    p.add_argument("--out", metavar="FILE", help="write the diff to this file instead of standard output")
    p.add_argument(
        "--allow-different-stacks", action="store_true",
        help="diff two plans of different stacks (without it, plans whose 'stack' differs are refused, exit 2)",
    )  # fmt: skip
    p.add_argument(
        "--fail-on", action="append", choices=FAIL_ON, metavar="{danger,warning,policy}",
        help="exit 1 (after the diff) when the change has a danger consequence; a warning or danger one; or a head "
        "plan that breaks a mandatory policy rule. Repeat for more than one",
    )  # fmt: skip
    p.set_defaults(handler=_run)


def _format_name(value: str) -> str:
    return "table" if value == "text" else value  # the plain form was called `text` before docs/cli.md


def compute(args: argparse.Namespace) -> tuple[list[StackDiff], dict[str, Mapping[str, Any]]]:
    """The diffs, and each stack's head plan (what `--fail-on policy` checks)."""
    from ndfleet.plans import plandiff
    from ndfleet.plans.planfiles import InputError, load_plan, load_plan_dir
    from ndfleet.stackconfig.names import stack_name_problem

    files = args.base is not None or args.head is not None
    dirs = args.base_dir is not None or args.head_dir is not None
    if files and dirs:
        raise UsageError("give either BASE.json HEAD.json or --base-dir/--head-dir, not both")
    if dirs:
        if args.base_dir is None or args.head_dir is None:
            raise UsageError("--base-dir and --head-dir go together")
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
        return plandiff.diff_stacks(bases, heads), dict(heads)
    if args.stack_name is not None and stack_name_problem(args.stack_name) is not None:
        raise UsageError(f"--stack-name: {stack_name_problem(args.stack_name)}")
    if args.base is None or args.head is None:
        raise UsageError("give two plan files (BASE.json HEAD.json), or --base-dir and --head-dir")
    base, head = load_plan(Path(args.base)), load_plan(Path(args.head))
    problem = None if args.allow_different_stacks else different_stacks(base, head, args.base, args.head)
    if problem is not None:
        raise InputError(problem)
    found = plandiff.diff_plans(base, head, args.stack_name)
    return [found], {found.stack: head}


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
        diffs, heads = compute(args)
    except UsageError as e:
        return fail(args, str(e), EXIT_USAGE)
    except InputError as e:
        return fail(args, str(e))
    out = plandiff.render_markdown(diffs, title=args.title) if args.format == "markdown" else \
        plandiff.render_text(diffs)
    if args.out:
        try:
            Path(args.out).write_text(out, encoding="utf-8")
        except OSError as e:
            return fail(args, f"cannot write {args.out}: {e.strerror or e}", EXIT_CANNOT_RUN)
    else:
        sys.stdout.write(out)
    reasons = fail_on_reasons(args.fail_on or [], diffs, heads)
    for reason in reasons:  # after the diff, on stderr, so the diff on stdout (or in --out) stays the diff alone
        print(f"fail-on {reason}", file=sys.stderr, flush=True)
    return EXIT_FINDINGS if reasons else EXIT_OK


def fail_on_reasons(wanted: list[str], diffs: list[StackDiff], heads: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Why `--fail-on` stops this change, one line per reason found (none: exit 0)."""
    from ndfleet.plans import policy_rules

    reasons = []
    severities = {"danger": ("danger",), "warning": ("danger", "warning")}
    for kind in dict.fromkeys(wanted):
        if kind in severities:
            for d in diffs:
                found = [c for c in d.consequences if c.severity in severities[kind]]
                if found:
                    reasons.append(f"{kind}: {d.stack}: {len(found)} {' or '.join(severities[kind])} consequence"
                                   f"{'s' if len(found) != 1 else ''} ({', '.join(sorted({c.rule for c in found}))})")
        elif kind == "policy":
            for stack, head in sorted(heads.items()):
                broken = [v for v in policy_rules.evaluate_plan(head) if v.mandatory]
                if broken:
                    rules = ", ".join(sorted({v.rule_id for v in broken}))
                    reasons.append(f"policy: {stack}: the head plan breaks {len(broken)} mandatory rule check"
                                   f"{'s' if len(broken) != 1 else ''} ({rules}; `ndfleet policy HEAD.json` lists "
                                   "them)")
    return reasons
