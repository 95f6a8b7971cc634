"""`ndfleet render --out DIR` writes inside DIR only, never through a symbolic link, and atomically: a failed write
(a full disk, simulated) leaves DIR as it was."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import yaml

from ndfleet.cli import main
from ndfleet.commands import render as render_cmd
from tests.conftest import base_config


def stack_file(folder: Path, **overrides: object) -> Path:
    path = folder / "Pulumi.rendertest.yaml"
    path.write_text(yaml.safe_dump({"config": {f"ndfleet:{k}": v for k, v in base_config(**overrides).items()}}))
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_symlink_at_a_file_name_is_replaced_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    (out / "compute").mkdir(parents=True)
    (out / "compute" / "validate-node").symlink_to(victim)
    assert main(["render", "--stack-file", str(stack_file(tmp_path)), "--out", str(out)]) == 0
    assert victim.read_text() == "precious\n"
    written = out / "compute" / "validate-node"
    assert not written.is_symlink() and written.read_text().startswith("#!")


def test_a_symlinked_island_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    (out / "compute").mkdir(parents=True)
    (out / "compute" / "ib00").symlink_to(outside, target_is_directory=True)
    # 150 nodes: two islands that render differently, so each gets its own folder.
    assert main(["render", "--stack-file", str(stack_file(tmp_path, nodes=150)), "--out", str(out)]) == 2
    assert list(outside.iterdir()) == []
    err = capsys.readouterr().err
    assert "ib00 is a symbolic link or not a folder; refusing to write through it; nothing was written" in err
    assert "Traceback" not in err


def test_a_full_disk_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["render", "--stack-file", str(stack_file(tmp_path)), "--out", str(out)]) == 0
    before = snapshot(out)
    capsys.readouterr()

    calls = {"n": 0}
    real_write = render_cmd._write_bytes

    def full_disk(fd: int, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 3:  # the third file hits a full disk half-way
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(fd, data)

    monkeypatch.setattr(render_cmd, "_write_bytes", full_disk)
    changed = stack_file(tmp_path, health={"validationLevel": "quick"})
    assert main(["render", "--stack-file", str(changed), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "No space left on device; nothing was written" in err and "Traceback" not in err
    assert snapshot(out) == before  # old files intact, no temporary or half-written file left


def test_a_symlinked_machine_kind_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "compute").symlink_to(outside, target_is_directory=True)
    assert main(["render", "--stack-file", str(stack_file(tmp_path)), "--out", str(out)]) == 2
    assert list(outside.iterdir()) == []
    assert "compute is a symbolic link or not a folder" in capsys.readouterr().err


def test_a_full_disk_on_a_fresh_folder_leaves_it_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(render_cmd, "_write_bytes", full_disk)
    out = tmp_path / "fresh"
    assert main(["render", "--stack-file", str(stack_file(tmp_path)), "--out", str(out)]) == 2
    assert list(out.iterdir()) == []


def test_written_files_have_their_modes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["render", "--stack-file", str(stack_file(tmp_path)), "--out", str(out)]) == 0
    assert (out / "compute" / "validate-node").stat().st_mode & 0o777 == 0o755
    assert (out / "compute" / "user-data").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("file_name", ["Pulumi.a\nb.yaml", "Pulumi.x;rm -rf y.yaml", "Pulumi.a b.yaml"])
def test_a_stack_name_from_a_file_name_is_checked_before_any_template(
    tmp_path: Path, file_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / file_name
    path.write_text(stack_file(tmp_path).read_text())
    out = tmp_path / "out"
    for argv in (["render", "--stack-file", str(path), "--out", str(out)], ["plan", "--stack-file", str(path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "is not valid: 1-100 characters: letters, digits, '-', '_' or '.'" in err
    assert not out.exists()


@pytest.mark.parametrize("name", ["../etc/x", "a\nb", "x" * 101])
def test_a_stack_name_from_the_command_line_is_checked(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", name]) == 2
    assert "--stack: stack name" in capsys.readouterr().err


def test_a_key_written_twice_in_a_stack_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = stack_file(tmp_path)
    path.write_text(path.read_text() + "  ndfleet:nodes: 4\n")
    assert main(["plan", "--stack-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert "key 'ndfleet:nodes' is written twice (lines" in err and "keep one" in err


def test_a_huge_stack_file_is_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "Pulumi.big.yaml"
    path.write_text("config:\n  ndfleet:tags:\n" + "".join(f"    t{i}: {'x' * 60}\n" for i in range(20_000)))
    assert main(["plan", "--stack-file", str(path)]) == 2
    assert "is larger than 1024 KiB: not a stack file" in capsys.readouterr().err


def test_a_key_with_and_without_its_namespace_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = stack_file(tmp_path)
    path.write_text(path.read_text() + "  nodes: 4\n")
    assert main(["plan", "--stack-file", str(path)]) == 2
    assert "'ndfleet:nodes' and 'nodes' are the same setting (ndfleet:nodes); keep one" in capsys.readouterr().err
