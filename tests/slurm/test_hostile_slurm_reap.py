"""slurm-reap under hostile scontrol: a delete that hangs, fails or prints bytes that are not UTF-8 must not stop the
run; every other gone node is still removed, the failures are reported, and the exit status says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ndfleet_node.slurm_reap import main

GONE = ("gone-a", "gone-hang", "gone-bytes", "gone-fail", "gone-z")
LINE = ("NodeName={name} Arch=x86_64 State=DOWN*+DYNAMIC_NORM+NOT_RESPONDING ThreadsPerCore=1 "
        "Reason=Not responding [slurm@2020-01-01T00:00:00]")

# A fake scontrol: `show node` lists GONE; `delete nodename=X` records X, then misbehaves as X's name says.
FAKE = """#!{python}
import sys, time
args = sys.argv[1:]
if args[:2] == ["show", "node"]:
    sys.stdout.buffer.write({listing!r})
    sys.exit(0)
name = args[1].split("=", 1)[1]
with open({log!r}, "a") as f:
    f.write(name + "\\n")
if name == "gone-hang":
    time.sleep(120)
if name == "gone-bytes":
    sys.stdout.buffer.write(b"\\xff\\xfe deleted?\\n")
    sys.stderr.buffer.write(b"\\xc3\\x28 odd\\n")
    sys.exit(1)
if name == "gone-fail":
    print("slurm_delete_node error: Node has running jobs", file=sys.stderr)
    sys.exit(1)
"""


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "deleted.log"
    listing = ("\n".join(LINE.format(name=n) for n in GONE) + "\n").encode() + b"NodeName=\xff\xfe State=IDLE\n"
    script = tmp_path / "scontrol"
    script.write_text(FAKE.format(python=sys.executable, listing=listing, log=str(log)))
    script.chmod(0o755)
    return script, log


def test_one_bad_delete_does_not_stop_the_others(fake: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    script, log = fake
    code = main(["--scontrol", str(script), "--after-seconds", "0", "--timeout", "2"])
    assert log.read_text().split() == list(GONE)  # every gone node was tried, in order, past the hang
    err = capsys.readouterr().err
    assert code == 1
    for name in ("gone-hang", "gone-bytes", "gone-fail"):
        assert f"could not delete {name}" in err
    assert "3 gone node(s) not deleted: gone-hang, gone-bytes, gone-fail" in err


def test_the_hung_delete_is_named_as_timed_out(fake: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    script, _ = fake
    main(["--scontrol", str(script), "--after-seconds", "0", "--timeout", "2"])
    hung = next(ln for ln in capsys.readouterr().err.splitlines() if "gone-hang" in ln)
    assert "timed out" in hung


def test_successful_deletes_are_reported(fake: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    script, _ = fake
    main(["--scontrol", str(script), "--after-seconds", "0", "--timeout", "2"])
    out = capsys.readouterr().out
    assert "deleted gone-a " in out and "deleted gone-z " in out


def test_a_listing_that_is_not_utf8_is_decoded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "scontrol"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.buffer.write(b'\\xff' * 100 + b'\\n')\n")
    script.chmod(0o755)
    assert main(["--scontrol", str(script), "--after-seconds", "0"]) == 0


def test_a_hung_listing_is_a_named_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "scontrol"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    script.chmod(0o755)
    assert main(["--scontrol", str(script), "--timeout", "1"]) == 2
    assert "cannot list nodes" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "soon"])
def test_bad_durations_are_refused_by_name(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--after-seconds", value])
    assert f"{value!r} is not a number of seconds" in capsys.readouterr().err
