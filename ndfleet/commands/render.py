"""`ndfleet render`: write a stack's node bootstrap as files, for review and for tests.

  ndfleet render --stack NAME --out DIR        (stacks/Pulumi.NAME.yaml)
  ndfleet render --stack-file PATH --out DIR   (any Pulumi stack file)

Writes the cloud-init user data (`user-data`), its gzip+base64 form as the scale set receives it
(`custom-data.b64`), the node bundle as the scale set's userData (`vm-user-data.b64`) and every file the node
receives from either, under their names (`ndfleet-unpack`, `bundle.json`, `validate-node`, the `ndfleet-node`
zipapp, `node.json`, `nccl.conf`, `*.service`, `*.target`, a drop-in as `<unit>.d-<name>`). When islands render
differently (each bootstrap names its island) every island gets its own folder DIR/<island>/. Exit 1 with the
configuration's message when the stack is invalid.

Files are written only inside DIR: symbolic links inside it are never followed (a link at a file's name is
replaced by the file; a link at an island folder's name is refused), and every file is first written under a
temporary name and renamed into place once all are written, so a failure (a full disk) leaves DIR as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ndfleet.commands.stackargs import add_stack_arguments

if TYPE_CHECKING:
    from ndfleet.nodefiles.bootstrap import RenderedBootstrap

EXECUTABLE = ("validate-node", "ndfleet-node")  # written 0755 (RenderedBootstrap.output_files gives the modes)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "render",
        help="write the node bootstrap (cloud-init user data, scripts, units) of a stack as files",
        description="Render the node bootstrap of a stack and write the user data and every script it carries.",
    )
    add_stack_arguments(p)
    p.add_argument("--out", metavar="DIR", required=True, help="folder to write into (created if missing)")
    p.set_defaults(handler=_run)


def _write_bytes(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _open_subfolder(parent_fd: int, name: str) -> int:
    """The folder `name` inside the open folder `parent_fd`, created if missing; a symbolic link there is refused
    (O_NOFOLLOW), so nothing is ever written outside --out."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(e.errno, f"{name} is a symbolic link or not a folder; refusing to write through it") from None
        raise


class _Staged:
    """Files written to temporary names inside their folders, then renamed into place all together: a failure
    (a full disk) leaves the folder as it was, with no partial file; an existing symbolic link at a target name is
    replaced by the file, never followed."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, str, str]] = []  # (folder fd, temporary name, final name)

    def add(self, folder_fd: int, name: str, content: str | bytes, mode: int) -> None:
        if "/" in name or name in ("", ".", ".."):
            raise OSError(errno.EINVAL, f"refusing to write a file named {name!r}")
        temporary = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder_fd)
        self.pending.append((folder_fd, temporary, name))
        try:
            _write_bytes(fd, content if isinstance(content, bytes) else content.encode())
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)

    def commit(self) -> None:
        for folder_fd, temporary, name in self.pending:
            os.replace(temporary, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        self.pending.clear()

    def discard(self) -> None:
        for folder_fd, temporary, _ in self.pending:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder_fd)
        self.pending.clear()


def _stage(staged: _Staged, folder_fd: int, rendered: RenderedBootstrap) -> list[str]:
    names = []
    for name, (data, mode) in sorted(rendered.output_files().items()):  # custom-data.b64 included
        staged.add(folder_fd, name, data, mode)
        names.append(name)
    return names


def _run(args: argparse.Namespace) -> int:
    # Imported here, for the chosen command only: `ndfleet --help` stays fast.
    from ndfleet.nodefiles.bootstrap import CUSTOM_DATA_MAX_BYTES, USER_DATA_MAX_BYTES
    from ndfleet.prepare import PrepareError, prepare_config
    from ndfleet.stackconfig.problems import SpecError
    from ndfleet.stackconfig.stackfile import StackFileError, load_stack

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
    staged = _Staged()
    folders: list[int] = []
    report: list[str] = []
    try:
        # --out itself is the user's choice (it may be a link); inside it nothing is followed.
        out.mkdir(parents=True, exist_ok=True)
        out_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
        folders.append(out_fd)
        for name, r in rendered.items():
            folder_fd = out_fd
            if per_island:
                folder_fd = _open_subfolder(out_fd, name)
                folders.append(folder_fd)
            written = _stage(staged, folder_fd, r)
            folder = out / name if per_island else out
            label = f"island {name}" if per_island or len(rendered) == 1 else f"{len(rendered)} identical islands"
            user_data = (
                f", userData {len(r.bundle):,} of {USER_DATA_MAX_BYTES:,} bytes, "
                f"{r.user_data_headroom_bytes:,} to spare"
                if r.bundle
                else ""
            )
            report.append(
                f"{label}: {len(written)} files in {folder}/ (customData {len(r.custom_data_bytes):,} of "
                f"{CUSTOM_DATA_MAX_BYTES:,} bytes, {r.headroom_bytes:,} to spare{user_data})"
            )
            report.append("  " + " ".join(written))
            if not per_island:
                break
        staged.commit()
    except OSError as e:
        staged.discard()
        print(f"ndfleet render: cannot write to {out}: {e.strerror or e}; nothing was written", file=sys.stderr)
        return 1
    finally:
        for fd in folders:
            os.close(fd)
    print("\n".join(report))
    return 0
