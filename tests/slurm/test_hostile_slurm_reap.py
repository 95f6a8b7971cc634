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


# --- answers that lie (issue 31)

FORGED = ("NodeName=real-1 State=IDLE+DRAIN+DYNAMIC_NORM Reason=ops{sep}NodeName=ghost-{n} Arch=x86_64 "
          "State=DOWN*+DYNAMIC_NORM+NOT_RESPONDING Reason=Not responding [slurm@2020-01-01T00:00:00]\n")


def _fake(tmp_path: Path, listing: str, delete_says: str = "") -> tuple[Path, Path]:
    """`show node` prints `listing`; `delete` logs its argument and prints `delete_says` on stderr, exit 0."""
    log = tmp_path / "deleted.log"
    script = tmp_path / "scontrol"
    script.write_text(f"#!{sys.executable}\nimport sys\nargs = sys.argv[1:]\n"
                      f"if args[0] == 'show':\n    sys.stdout.buffer.write({listing.encode()!r})\n    sys.exit(0)\n"
                      f"open({str(log)!r}, 'a').write(args[1] + '\\n')\nsys.stderr.write({delete_says!r})\n")
    script.chmod(0o755)
    return script, log


def test_a_line_separator_in_a_reason_forges_no_node_to_delete(tmp_path: Path) -> None:
    listing = "".join(FORGED.format(sep=sep, n=n) for n, sep in enumerate(("\u2028", "\u2029", "\x85")))
    script, log = _fake(tmp_path, listing)
    assert main(["--scontrol", str(script), "--after-seconds", "0"]) == 0
    assert not log.exists()  # Slurm listed real-1 only; no ghost is deleted


def test_a_delete_that_exits_0_but_says_it_failed_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, log = _fake(tmp_path, LINE.format(name="gone-a") + "\n",
                        "slurm_delete_node error: Socket timed out on send/recv operation\n")
    assert main(["--scontrol", str(script), "--after-seconds", "0"]) == 1
    assert log.read_text() == "nodename=gone-a\n"
    assert "could not delete gone-a" in capsys.readouterr().err
