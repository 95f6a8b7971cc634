"""`ndfleet-node COMMAND ...`: one entry point for everything that runs on a node.

Each subcommand lives in its own module, which exposes `register(subparsers)`; the registered handler returns
the process exit code. Invoked as `validate-node` (a link or a wrapper of that name), it runs `validate`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

# Module per subcommand (relative to this package), in the order `ndfleet-node --help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "setup", "validate", "health", "burnin", "burnin.slurm", "impact", "slurm_health", "slurm_reap", "slurm_export",
    "metrics", "roll.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ndfleet-node", description="ndfleet's program on a cluster node.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        # The nodes' zipapp leaves out what only the controller runs (ndfleet.nodefiles.nodeapp.CONTROLLER_ONLY).
        # find_spec of `a.b` imports `a` first: a left-out package (roll/) raises rather than answering None.
        try:
            present = importlib.util.find_spec(f"{__package__}.{name}") is not None
        except ModuleNotFoundError:
            present = False
        if present:
            importlib.import_module(f"{__package__}.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and os.path.basename(sys.argv[0]) == "validate-node":
        from ndfleet_node.validate import main as validate_main

        return validate_main(sys.argv[1:])
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
