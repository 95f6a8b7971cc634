"""Every `ndfleet` command follows one convention (docs/cli.md, ndfleet/cliconvention.py).

The commands are found by walking the argparse parser itself, so a command added later is held to the convention
without editing this file: option spellings, a usage error's exit code (64) and prefix, a could-not-run error's
exit code (2) and prefix, and under `--format json` an error as a JSON object on stdout. Also `render --out`
removing the files an earlier render wrote and no other, and `status --watch` stopping on a permanent error.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ndfleet.cli import build_parser, main
from ndfleet.cliconvention import (
    EXIT_CANNOT_RUN,
    EXIT_USAGE,
    FORMAT_VALUES,
    REFUSED_SPELLINGS,
    leaf_parsers,
)
from ndfleet.commands import render

REPO = Path(__file__).resolve().parents[1]
LEAVES = leaf_parsers(build_parser())
# Commands that read Azure also carry their own JSON document (error + exitCode among its keys).
STACK_OPTIONS = {"--stack", "--stack-file", "--stack-name"}


def words(parser: argparse.ArgumentParser) -> list[str]:
    """`ndfleet impact list` -> ["impact", "list"]: the argv that reaches this command."""
    return parser.prog.split()[1:]


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}  # noqa: SLF001


def argv_that_cannot_run(parser: argparse.ArgumentParser, tmp_path: Path, fmt: str | None) -> list[str]:
    """Arguments that parse but name something that does not exist: a stack, or a plan file."""
    argv = words(parser)
    missing = str(tmp_path / "does-not-exist.json")
    for action in parser._actions:  # noqa: SLF001
        if action.option_strings or isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            continue
        argv.append(missing if action.dest in ("plan", "base", "head") else "x")
    opts = options(parser)
    if "--stack" in opts:
        argv += ["--stack", "no-such-stack"]
    if "--out" in opts and opts["--out"].required:
        argv += ["--out", str(tmp_path / "out")]
    if fmt is not None:
        argv += ["--format", fmt]
    return argv


def ids(parsers: list[argparse.ArgumentParser]) -> list[str]:
    return [" ".join(words(p)) for p in parsers]


def json_commands() -> list[argparse.ArgumentParser]:
    found = []
    for p in LEAVES:
        fmt = options(p).get("--format")
        if fmt is not None and "json" in (fmt.choices or ()):
            found.append(p)
    return found


@pytest.fixture(autouse=True)
def _from_the_repository(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(REPO)  # `--stack NAME` reads stacks/ of the repository
    for name in ("AZURE_SUBSCRIPTION_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    yield


def test_the_walk_finds_every_command() -> None:
    found = set(ids(LEAVES))
    assert {"plan", "diff", "policy", "render", "preflight", "monitoring", "impact list", "impact show", "cost",
            "status"} <= found  # fmt: skip
    # Each command knows its name as typed, for its error prefix (cli.build_parser sets it).
    for p in LEAVES:
        assert p.get_default("prog") == p.prog


@pytest.mark.parametrize("parser", LEAVES, ids=ids(LEAVES))
def test_options_are_spelt_one_way(parser: argparse.ArgumentParser) -> None:
    opts = options(parser)
    assert not REFUSED_SPELLINGS & set(opts), f"{parser.prog}: use --format / --out (docs/cli.md)"
    for action in parser._actions:  # noqa: SLF001
        if action.dest == "format":
            assert action.option_strings == ["--format"], parser.prog
            assert set(action.choices or ()) <= FORMAT_VALUES and "table" in (action.choices or ()), parser.prog
            assert action.default == "table", parser.prog
        if action.dest == "out":
            assert action.option_strings == ["--out"], parser.prog
    # `--stack` always loads a stack: it comes with --stack-file and --stack-name (stackargs.add_stack_arguments).
    if "--stack" in opts:
        assert set(opts) >= STACK_OPTIONS, parser.prog


@pytest.mark.parametrize("parser", LEAVES, ids=ids(LEAVES))
def test_a_usage_error_exits_64_with_the_prefix(parser: argparse.ArgumentParser,
                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        main([*words(parser), "--no-such-option"])
    err = capsys.readouterr().err
    assert stopped.value.code == EXIT_USAGE
    # argparse's own line: the command's prog (or `ndfleet` for an unknown option), then `: error: `.
    assert re.match(r"ndfleet[a-z ]*: error: ", err.splitlines()[-1]), err
    assert err.startswith("usage: ndfleet")


def test_options_that_do_not_go_together_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "a.json", "b.json", "--base-dir", "x", "--head-dir", "y"]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("ndfleet diff: error: give either BASE.json HEAD.json or --base-dir")
    assert main(["policy"]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("ndfleet policy: error: give a plan file")
    # Found in the handler, raised as UsageError: 64 and one line, not a traceback (issue 44).
    assert main(["cost", "--stack", "dev", "--write", "x.json"]) == EXIT_USAGE
    assert capsys.readouterr().err == "ndfleet cost: error: --write records refreshed prices: give it with --refresh\n"


@pytest.mark.parametrize("parser", LEAVES, ids=ids(LEAVES))
def test_a_command_that_cannot_run_exits_2_with_one_prefixed_line(
    parser: argparse.ArgumentParser, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(argv_that_cannot_run(parser, tmp_path, None))
    out, err = capsys.readouterr()
    assert code == EXIT_CANNOT_RUN, err
    assert err.startswith(f"{parser.prog}: error: "), err
    assert "Traceback" not in err and out == ""
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.parametrize("parser", json_commands(), ids=ids(json_commands()))
def test_an_error_under_format_json_is_a_json_object_on_stdout(
    parser: argparse.ArgumentParser, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(argv_that_cannot_run(parser, tmp_path, "json"))
    out, err = capsys.readouterr()
    doc = json.loads(out)  # the whole of stdout is one JSON document
    assert code == EXIT_CANNOT_RUN
    assert doc["exitCode"] == EXIT_CANNOT_RUN
    assert isinstance(doc["error"], str) and "no-such-stack" in doc["error"]
    assert "Traceback" not in err


# ----------------------------------------------------------------------------------------------------------
# render --out: the files an earlier render wrote, and no other, are removed


def test_render_removes_what_an_earlier_render_wrote_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not ndfleet's")
    (out / "compute" / "gone-island").mkdir(parents=True)
    (out / "compute" / "gone-island" / "user-data").write_text("stale")  # an earlier render's island
    (out / "compute" / "old-file").write_text("stale")
    (out / "mine.txt").write_text("the user's")  # never listed: never touched
    (out / "link").symlink_to(outside, target_is_directory=True)
    earlier = ["compute/gone-island/user-data", "compute/old-file", "link/keep", "../outside/keep", "/etc/hostname"]
    (out / render.MANIFEST).write_text(json.dumps({"files": earlier}))

    assert main(["render", "--stack", "dev", "--out", str(out)]) == 0
    report = capsys.readouterr().out
    assert "removed 2 files an earlier render wrote" in report
    assert not (out / "compute" / "old-file").exists()
    assert not (out / "compute" / "gone-island").exists()  # emptied, so removed
    assert (out / "mine.txt").read_text() == "the user's"
    assert (outside / "keep").read_text() == "not ndfleet's"  # through a link or `..`: never
    manifest = json.loads((out / render.MANIFEST).read_text())["files"]
    on_disk = sorted(
        p.relative_to(out).as_posix() for p in out.rglob("*")
        if p.is_file() and not p.is_symlink() and p.name not in (render.MANIFEST, "mine.txt")
    )  # fmt: skip
    assert manifest == on_disk and "compute/user-data" in manifest


# ----------------------------------------------------------------------------------------------------------
# status --watch: a permanent error stops it, a passing one does not


def test_watch_stops_on_a_permanent_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.status.test_status import Reply, azure, status_run

    def no_second_read(seconds: float) -> None:
        raise AssertionError("--watch slept after a 403: it would repeat the same error for ever")

    forbidden = azure(vmss_list=[Reply(403, "status/error-403-vmss-read.json")])
    run = status_run(capsys, tmp_path, forbidden, "--watch", "5", fmt="table", sleep=no_second_read)
    assert run.code == EXIT_CANNOT_RUN
    assert run.err.startswith("ndfleet status: error: could not read: no permission")
    assert "ndfleet status: error: stopped watching" in run.err


def test_watch_keeps_reading_through_throttling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.status.test_status import THROTTLED, azure, status_run

    sleeps: list[float] = []
    run = status_run(capsys, tmp_path, azure(vmss_list=[THROTTLED]), "--watch", "5", "--watch-count", "2",
                     sleep=sleeps.append)  # fmt: skip
    assert (run.code, sleeps) == (EXIT_CANNOT_RUN, [5.0])
    assert [json.loads(line)["exitCode"] for line in run.out.splitlines()] == [2, 2]


# ----------------------------------------------------------------------------------------------------------
# Two errors that used to mislead


def test_the_project_file_given_as_a_stack_file_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack-file", "Pulumi.yaml"]) == EXIT_CANNOT_RUN
    err = capsys.readouterr().err
    assert "Pulumi.yaml is the Pulumi project file (it has 'runtime'), not a stack file" in err
    assert "stack name" not in err


def test_a_secure_value_says_it_is_encrypted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (REPO / "stacks" / "Pulumi.dev.yaml").read_text()
    lines = [
        "  ndfleet:sshPublicKey:\n    secure: v1:AAABBBCCC=" if line.startswith("  ndfleet:sshPublicKey:") else line
        for line in text.splitlines()
    ]
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert main(["cost", "--stack-file", str(path)]) == EXIT_CANNOT_RUN
    err = capsys.readouterr().err
    assert "ndfleet:sshPublicKey is encrypted in the stack file (`secure:`)" in err
    assert "OpenSSH public key line" not in err
