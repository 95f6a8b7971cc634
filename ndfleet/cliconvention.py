"""The CLI convention every `ndfleet` command follows (docs/cli.md): exit codes, the error prefix, JSON errors.

One home: commands return these codes and print errors through `fail`, never their own prefix; tests/
test_cli_convention.py walks the parser and holds every command to it. Standard library only (building the
parser stays fast).

Exit codes follow grep(1) and diff(1) as POSIX specifies them (0 the answer is yes, 1 the answer is no, >1 trouble)
and keep usage errors apart with sysexits(3)'s EX_USAGE (64), so a script can tell "you called it wrong" from
"it could not run" (docs/cli.md, "Exit codes", cites both).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

EXIT_OK = 0  # ran, and found nothing wrong
EXIT_FINDINGS = 1  # ran, and found something: a violation, a failed check, an unhealthy node
EXIT_CANNOT_RUN = 2  # could not give the answer: a stack refused, a file unreadable, Azure not reachable
EXIT_USAGE = 64  # the command line itself is wrong (sysexits.h EX_USAGE); nothing was read or run
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)

# The one option name for each job; tests/test_cli_convention.py refuses the other spellings.
FORMAT_OPTION = "--format"  # values from FORMAT_VALUES only
OUT_OPTION = "--out"  # where files go (a folder, or one file)
FORMAT_VALUES = frozenset({"table", "json", "markdown"})  # table: the plain form for a terminal
REFUSED_SPELLINGS = frozenset({"--output", "-o", "--output-dir", "--outdir", "--json", "--fmt", "-f"})


class Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error exits EX_USAGE (64), not 2, which ndfleet keeps for "could not run"."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class UsageError(Exception):
    """Options that parse but do not go together (found in a handler): exit EX_USAGE with the usual prefix.

    A handler may raise it anywhere: `ndfleet.cli.main` reports it through `fail` with exit 64 (one prefixed line on
    stderr, or the JSON error document under `--format json`, which was understood), so it never ends in a
    traceback."""


def prog_of(args: argparse.Namespace) -> str:
    """The command as typed (`ndfleet impact list`); the parser sets it on every leaf command (cli.build_parser)."""
    return str(getattr(args, "prog", None) or "ndfleet")


def error_line(prog: str, message: str) -> str:
    """The one error prefix, argparse's own (`ndfleet plan: error: ...`), so usage and run errors read alike."""
    return f"{prog}: error: {message}"


def wants_json(args: argparse.Namespace) -> bool:
    return getattr(args, "format", None) == "json"


def error_document(prog: str, message: str, code: int) -> str:
    """An error where JSON was asked for: this object on stdout, alone. Commands whose JSON document has its own
    `error` and `exitCode` (preflight, status) print that document instead, with the same two keys."""
    return json.dumps({"command": prog, "error": message, "exitCode": code}, indent=2)


def fail(args: argparse.Namespace, message: str, code: int = EXIT_CANNOT_RUN) -> int:
    """Report an error as the convention says and return the exit code: under `--format json` a JSON object on
    stdout (error_document), else one prefixed line on stderr."""
    from ndfleet.azure.text import terminal_lines

    # Configuration errors list every problem, one a line: the lines are kept, each cleaned for the terminal.
    message = terminal_lines(str(message).rstrip("\n").split("\n"))
    if wants_json(args):
        print(error_document(prog_of(args), message, code), flush=True)
    else:
        print(error_line(prog_of(args), message), file=sys.stderr, flush=True)
    return code


def leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser that runs a command (plan, impact list, ...), found by walking the subcommand tree: a command
    added to the parser is covered without a list to keep."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001 - no public walk
    if not subs:
        return [parser]
    found: list[argparse.ArgumentParser] = []
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):  # an alias maps to the same parser
            found += leaf_parsers(child)
    return found
