"""The arguments every command that reads a stack shares (standard library only: building the parser stays fast)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ndfleet.stackconfig.stackfile import StackFile


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """`--stack NAME` or `--stack-file PATH` (with an optional `--stack-name`), for every command that reads a
    stack."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--stack",
        metavar="NAME",
        help="stack name: reads Pulumi.NAME.yaml from the project's stackConfigDir "
        "(ndfleet's: stacks/), else beside Pulumi.yaml, or the working directory outside a project")
    group.add_argument("--stack-file", metavar="PATH", help="any file in Pulumi's stack-file format")
    parser.add_argument(
        "--stack-name", metavar="NAME",
        help="with --stack-file: the stack's name (default: NAME of Pulumi.NAME.yaml); resource names derive from "
        "it, so give the original's name to plan or diff an edited copy",
    )  # fmt: skip


def load_stack_from_args(args: argparse.Namespace) -> StackFile:
    """The stack that `--stack`, `--stack-file` and `--stack-name` (add_stack_arguments) name."""
    from ndfleet.stackconfig.stackfile import load_stack

    return load_stack(name=args.stack, path=args.stack_file, stack_name=args.stack_name)
