"""`ndfleet render`: write every file each machine of a stack receives, for review and for tests.

  ndfleet render --stack NAME --out DIR        (stacks/Pulumi.NAME.yaml)
  ndfleet render --stack-file PATH --out DIR   (any Pulumi stack file)

One folder per machine kind (ndfleet/machine_files.py):

  DIR/compute/              compute nodes, when every island renders the same; else DIR/compute/<island>/
  DIR/slurm-controller/     with `ndfleet:scheduler: slurm`: the controller
  DIR/slurm-login/          ... and the login node(s)

Each holds the cloud-init user data (`user-data`), its gzip+base64 form as Azure receives it (`custom-data.b64`),
the VM or scale-set userData (`vm-user-data.b64`: a compute node's bundle, a Slurm machine's configuration, on
the controller after its library bundle) and every file the machine receives from either, under their names
(`ndfleet-unpack`, `bundle.json`, `validate-node`, the `ndfleet-node` zipapp, `node.json`, `nccl.conf`, `slurm.conf`,
`*.service`, `*.target`, a drop-in as `<unit>.d-<name>`, the controller's node-program modules in
`ndfleet-node.zip`). Exit 2 with the configuration's message when the stack is invalid (docs/cli.md).

Files are written only inside DIR: symbolic links inside it are never followed (a link at a file's name is
replaced by the file; a link at a folder's name is refused), and every file is first written under a
temporary name and renamed into place once all are written, so a failure (a full disk) leaves DIR as it was.

DIR holds a manifest, `.ndfleet-render.json`, of the files this command wrote there. Rendering again into DIR
removes the files the earlier render wrote that this one does not (an island renamed, a file no longer sent), so
DIR is exactly what the stack's machines receive; a file the manifest does not list (yours) is never touched.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import posixpath
import secrets
from pathlib import Path
from typing import Any

from ndfleet.cliconvention import EXIT_OK, fail
from ndfleet.commands.stackargs import add_stack_arguments, load_stack_from_args


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "render",
        help="write every file each machine of a stack receives (user data, scripts, units, Slurm files)",
        description="Render what each machine kind of a stack receives (compute nodes, Slurm controller and login) "
        "and write its customData, userData and every file they carry, one folder per machine kind.",
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


def _folder_of(out_fd: int, relative: str, opened: dict[str, int], created: list[str]) -> int:
    """The open folder `relative` ("compute/ib00") inside --out, each level created if missing (listed in
    `created`, so a failed run can remove it again) and never a link."""
    if relative in ("", "."):
        return out_fd
    if relative not in opened:
        parent, name = posixpath.split(relative)
        parent_fd = _folder_of(out_fd, parent, opened, created)
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent_fd)
            created.append(relative)
        opened[relative] = _open_subfolder(parent_fd, name)
    return opened[relative]


def _remove_created(out_fd: int, opened: dict[str, int], created: list[str]) -> None:
    """Remove the folders this run created (innermost first), so a failure leaves --out as it was."""
    for relative in reversed(created):
        parent, name = posixpath.split(relative)
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=opened.get(parent, out_fd))


MANIFEST = ".ndfleet-render.json"
MAX_MANIFEST_BYTES = 1 << 20  # a few hundred paths; anything larger is not ours


def _read_manifest(out_fd: int) -> list[str]:
    """The files an earlier render wrote into --out (relative paths), from its manifest; [] without one. A
    manifest that is not ours in shape, or a path in it that could leave --out, is not acted on."""
    try:
        fd = os.open(MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=out_fd)
    except OSError:
        return []
    try:
        if not stat_is_regular(fd):
            return []
        data = os.read(fd, MAX_MANIFEST_BYTES + 1)
    finally:
        os.close(fd)
    try:
        doc = json.loads(data) if len(data) <= MAX_MANIFEST_BYTES else None
    except ValueError:
        return []
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list):
        return []
    return [f for f in files if isinstance(f, str) and _safe_relative(f)]


def stat_is_regular(fd: int) -> bool:
    import stat

    return stat.S_ISREG(os.fstat(fd).st_mode)


def _safe_relative(path: str) -> bool:
    parts = path.split("/")
    return not path.startswith("/") and all(p not in ("", ".", "..") for p in parts) and "\0" not in path


def _remove_stale(out_fd: int, stale: list[str]) -> tuple[list[str], list[str]]:
    """Remove the files of an earlier render that this one did not write (never following a link: the folders are
    opened with O_NOFOLLOW, a link at a file's name is removed as a link), then their folders once empty.
    Returns (removed, left): `left` could not be removed and stays in the manifest for the next run."""
    removed: list[str] = []
    left: list[str] = []
    folders: set[str] = set()
    for relative in sorted(stale):
        folder, name = posixpath.split(relative)
        fd = out_fd
        try:
            for part in folder.split("/") if folder else []:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                if fd != out_fd:
                    os.close(fd)
                fd = nxt
            os.unlink(name, dir_fd=fd)
            removed.append(relative)
            while folder:
                folders.add(folder)
                folder = posixpath.dirname(folder)
        except FileNotFoundError:
            pass  # already gone
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):  # a link or a file now on the way: not ours, dropped
                left.append(relative)
        finally:
            if fd != out_fd:
                os.close(fd)
    for folder in sorted(folders, key=lambda f: -f.count("/")):  # innermost first; a folder still used stays
        parent, name = posixpath.split(folder)
        with contextlib.suppress(OSError):
            if not parent:
                os.rmdir(name, dir_fd=out_fd)
            else:
                parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=out_fd)
                try:
                    os.rmdir(name, dir_fd=parent_fd)
                finally:
                    os.close(parent_fd)
    return removed, left


def _run(args: argparse.Namespace) -> int:
    # Imported here, for the chosen command only: `ndfleet --help` stays fast.
    from ndfleet.machine_files import machine_files
    from ndfleet.prepare import PrepareError, prepare_config
    from ndfleet.stackconfig.problems import SpecError
    from ndfleet.stackconfig.stackfile import StackFileError

    try:
        stack = load_stack_from_args(args)
        # The same prepare step as plan, preflight and `pulumi up`: same stacks accepted, same refused.
        prepared = prepare_config(stack.ndfleet_config, stack.name, stack.engine_config)
        machines = machine_files(prepared)
    except (StackFileError, SpecError, PrepareError) as e:
        return fail(args, str(e))
    out = Path(args.out)
    staged = _Staged()
    opened: dict[str, int] = {}
    created: list[str] = []
    out_fd = -1
    report: list[str] = []
    written: list[str] = []
    try:
        try:
            # --out itself is the user's choice (it may be a link); inside it nothing is followed.
            out.mkdir(parents=True, exist_ok=True)
            out_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
            earlier = _read_manifest(out_fd)
            for machine in machines:
                names = sorted(machine.files)
                for name in names:
                    data, mode = machine.files[name]
                    folder, base = posixpath.split(posixpath.join(machine.folder, name))
                    if ".." in folder.split("/"):
                        raise OSError(errno.EINVAL, f"refusing to write a file named {name!r}")
                    staged.add(_folder_of(out_fd, folder, opened, created), base, data, mode)
                    written.append(posixpath.join(folder, base) if folder else base)
                report.append(f"{machine.label}: {len(names)} files in {out / machine.folder}/ ({machine.sizes()})")
                report.append("  " + " ".join(names))
            staged.commit()
        except OSError as e:
            staged.discard()
            if out_fd >= 0:
                _remove_created(out_fd, opened, created)
            return fail(args, f"cannot write to {out}: {e.strerror or e}; nothing was written")
        try:
            # Every file is in place; now the earlier render's leftovers go, and the manifest says what DIR holds.
            removed, left = _remove_stale(out_fd, sorted(set(earlier) - set(written)))
            manifest = json.dumps({"writtenBy": "ndfleet render", "files": sorted({*written, *left})}, indent=1)
            staged.add(out_fd, MANIFEST, manifest + "\n", 0o644)
            staged.commit()
        except OSError as e:
            staged.discard()
            return fail(args, f"wrote every file to {out} but could not update {MANIFEST}: {e.strerror or e}; "
                        "files of an earlier render may remain")
    finally:
        for fd in opened.values():
            os.close(fd)
        if out_fd >= 0:
            os.close(out_fd)
    if removed:
        report.append(f"removed {len(removed)} files an earlier render wrote that this stack no longer has: "
                      + " ".join(removed))
    print("\n".join(report))
    return EXIT_OK
