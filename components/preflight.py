"""PLACEHOLDER: owned by a helper; replaced by the real command."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("preflight", help="(not built yet)")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    print("not built yet")
    return 2
