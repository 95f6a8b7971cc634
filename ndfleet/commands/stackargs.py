"""The arguments every command that reads a stack shares (standard library only: building the parser stays fast)."""

from __future__ import annotations

import argparse


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """`--stack NAME` or `--stack-file PATH`, for every command that reads a stack."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--stack", metavar="NAME", help="stack name: reads stacks/Pulumi.NAME.yaml")
    group.add_argument("--stack-file", metavar="PATH", help="any file in Pulumi's stack-file format")
