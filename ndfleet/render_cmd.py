"""`ndfleet render`: write a stack's node bootstrap as files, for review and for tests.

  ndfleet render --stack NAME --out DIR        (stacks/Pulumi.NAME.yaml)
  ndfleet render --stack-file PATH --out DIR   (any Pulumi stack file)

Writes the cloud-init user data (`user-data`), its gzip+base64 form as the scale set receives it
(`custom-data.b64`) and every file it carries, under their names (`validate-node`, the `ndfleet-node` zipapp,
`node.json`, `nccl.conf`, `*.service`, `*.target`). When islands render differently
(each bootstrap names its island) every island gets its own folder DIR/<island>/. Exit 1 with the
configuration's message when the stack is invalid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ndfleet.bootstrap import CUSTOM_DATA_MAX_BYTES, BootstrapTooLarge, RenderedBootstrap, render_bootstrap
from ndfleet.spec.config import SpecError, load_spec
from ndfleet.spec.stackfile import StackFileError, add_stack_arguments, load_stack


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
    for name, (data, mode) in sorted(rendered.output_files().items()):
        path = folder / name
        path.write_bytes(data)
        path.chmod(mode)
        written.append(path)
    return written


def _run(args: argparse.Namespace) -> int:
    try:
        stack = load_stack(name=args.stack, path=args.stack_file)
        spec = load_spec(stack.ndfleet_config, stack.name)
        rendered = {island.name: render_bootstrap(spec, island) for island in spec.islands}
    except (StackFileError, SpecError, BootstrapTooLarge) as e:
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
