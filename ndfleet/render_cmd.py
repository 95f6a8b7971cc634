"""`ndfleet render`: write a stack's node bootstrap as files, for review and for tests.

  ndfleet render --stack NAME --out DIR        (stacks/Pulumi.NAME.yaml)
  ndfleet render --stack-file PATH --out DIR   (any Pulumi stack file)

Writes the cloud-init user data (`user-data`), its gzip+base64 form as the scale set receives it
(`custom-data.b64`) and every script and unit it carries, under their names (`validate-node`,
`ndfleet-setup`, `ndfleet-health`, `nccl.conf`, `*.service`, `*.target`). When islands render differently
(each bootstrap names its island) every island gets its own folder DIR/<island>/. Exit 1 with the
configuration's message when the stack is invalid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ndfleet.bootstrap import CUSTOM_DATA_MAX_BYTES, RenderedBootstrap
from ndfleet.prepare import PrepareError, prepare_config
from ndfleet.spec.config import SpecError
from ndfleet.spec.stackfile import StackFileError, add_stack_arguments, load_stack

EXECUTABLE = ("validate-node", "ndfleet-setup", "ndfleet-health")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "render",
        help="write the node bootstrap (cloud-init user data, scripts, units) of a stack as files",
        description="Render the node bootstrap of a stack and write the user data and every script it carries.",
    )
    add_stack_arguments(p)
    p.add_argument("--out", metavar="DIR", required=True, help="folder to write into (created if missing)")
    p.set_defaults(handler=_run)


def _write(folder: Path, rendered: RenderedBootstrap) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in sorted(rendered.files.items()):
        path = folder / name
        path.write_text(content)
        path.chmod(0o755 if name in EXECUTABLE else 0o644)
        written.append(path)
    b64 = folder / "custom-data.b64"
    b64.write_text(rendered.custom_data + "\n")
    written.append(b64)
    return written


def _run(args: argparse.Namespace) -> int:
    try:
        stack = load_stack(name=args.stack, path=args.stack_file)
        # The same prepare step as plan, preflight and `pulumi up`: same stacks accepted, same refused.
        prepared = prepare_config(stack.ndfleet_config, stack.name, stack.engine_config)
        rendered = {p.island.name: p.bootstrap for p in prepared.islands}
    except (StackFileError, SpecError, PrepareError) as e:
        print(f"ndfleet render: {e}", file=sys.stderr)
        return 1
    out = Path(args.out)
    per_island = len({tuple(sorted(r.files.items())) for r in rendered.values()}) > 1
    try:
        for name, r in rendered.items():
            folder = out / name if per_island else out
            written = _write(folder, r)
            label = f"island {name}" if per_island or len(rendered) == 1 else f"{len(rendered)} identical islands"
            print(
                f"{label}: {len(written)} files in {folder}/ (customData {len(r.custom_data_bytes):,} of "
                f"{CUSTOM_DATA_MAX_BYTES:,} bytes, {r.headroom_bytes:,} to spare)"
            )
            print("  " + " ".join(p.name for p in written))
            if not per_island:
                break
    except OSError as e:
        print(f"ndfleet render: cannot write to {out}: {e}", file=sys.stderr)
        return 1
    return 0
