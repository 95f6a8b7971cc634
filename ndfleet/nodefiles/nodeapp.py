"""The node program as a zipapp (`/opt/ndfleet/bin/ndfleet-node`), built deterministically.

Every `*.py` under node/ndfleet_node/ goes in, sorted, without its comments and docstrings (`strip`: customData
has a 64 KB limit and the readable source is in the repository), with a fixed timestamp (1980-01-01) and fixed
permissions, stored uncompressed (the node bundle carries it xz-compressed as a whole, nodebundle.py,
which compresses across files: about a third smaller than deflating each file), behind a
`#!/usr/bin/env python3` line: the same source gives the same bytes, so customData does not change between
runs. `python3 ndfleet-node COMMAND ...` runs it.
"""

from __future__ import annotations

import ast
import functools
import io
import tokenize
import zipfile
from pathlib import Path

import ndfleet_node

PACKAGE_DIR = Path(ndfleet_node.__file__).resolve().parent
SHEBANG = b"#!/usr/bin/env python3\n"
ROOT_MAIN = b"import sys\nfrom ndfleet_node.__main__ import main\nsys.exit(main())\n"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def _entry(name: str, data: bytes) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    info.create_system = 3  # Unix, whatever machine builds it
    return info, data


def _docstring_nodes(tree: ast.AST) -> list[tuple[ast.Expr, bool]]:
    """(docstring statement, whether it is its body's only statement) for the module, classes and functions."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                first.value.value, str
            ):
                found.append((first, len(node.body) == 1))
    return found


def strip(source: str) -> str:
    """The source without comments, docstrings and blank lines; code lines are kept as they are (so a
    traceback's line text still reads), which makes the result depend on the source only."""
    lines = source.splitlines()
    keep: set[int] = set()  # lines inside a multi-line string: kept as they are, blank or not
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
            keep.update(range(tok.start[0], tok.end[0]))
    for expr, alone in _docstring_nodes(ast.parse(source)):
        first, last = expr.lineno - 1, (expr.end_lineno or expr.lineno) - 1
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        if lines[first][: expr.col_offset].strip() or lines[last][expr.end_col_offset or 0 :].strip(" ;"):
            continue  # shares a line with other code (`class E(Exception): """..."""`): left as it is
        lines[first] = f"{indent}pass" if alone else ""
        for i in range(first + 1, last + 1):
            lines[i] = ""
            keep.discard(i)
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col].rstrip()
    return "\n".join(line for i, line in enumerate(lines) if line.strip() or i in keep) + "\n"


def source_files() -> list[Path]:
    return sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)


# What only the Slurm controller runs, from its own archive (`library` below: the elastic programs, the gone-node
# reaper's, the Slurm state exporter's and the burn-in's timers): left out of the nodes' zipapp, whose userData has
# a 64 KB limit. The burn-in's Slurm mode reserves nodes and starts the tests from the controller; the nodes keep
# the hostfile mode (`burnin`) and the test runner it starts on them. Paths relative to the package; a folder ends
# with "/".
CONTROLLER_ONLY = ("elastic/", "slurm_reap.py", "slurm_export.py", "sacct.py", "burnin/slurm.py", "spares.py",
                   "host_ledger.py", "failed_jobs.py", "requeued_jobs.py", "roll/")


def bundled_files() -> list[Path]:
    def controller_only(rel: str) -> bool:
        return any(rel.startswith(c) if c.endswith("/") else rel == c for c in CONTROLLER_ONLY)

    return [p for p in source_files() if not controller_only(p.relative_to(PACKAGE_DIR).as_posix())]


def _archive(paths: list[Path], *, app: bool) -> bytes:
    buf = io.BytesIO()
    if app:
        buf.write(SHEBANG)  # before the archive, as zipapp does: the archive's offsets then count it
    with zipfile.ZipFile(buf, "w") as z:
        if app:
            z.writestr(*_entry("__main__.py", ROOT_MAIN))
        for path in paths:
            name = "ndfleet_node/" + path.relative_to(PACKAGE_DIR).as_posix()
            z.writestr(*_entry(name, strip(path.read_text(encoding="utf-8")).encode()))
    return buf.getvalue()


@functools.lru_cache(maxsize=1)
def build() -> bytes:
    """The zipapp's bytes (cached: the source does not change while the tool runs)."""
    return _archive(bundled_files(), app=True)


def _module_file(dotted: str) -> Path | None:
    """node/ndfleet_node/... for `ndfleet_node.a.b` (a module or a package), None for anything else."""
    parts = dotted.split(".")
    if parts[0] != "ndfleet_node":
        return None
    base = PACKAGE_DIR.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _dotted(path: Path) -> str:
    rel = path.relative_to(PACKAGE_DIR).with_suffix("").parts
    return ".".join(("ndfleet_node", *(rel[:-1] if rel[-1] == "__init__" else rel)))


def _load_time_nodes(tree: ast.AST) -> list[ast.AST]:
    """The statements Python runs when it imports the module: everything but function bodies. An import inside a
    function is the module's optional part, which a machine may lack on purpose (impact_categories imports the
    validator's checks only when asked about a check the controller never reports)."""
    found: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        found.append(node)
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return found


def _imports(path: Path) -> set[str]:
    """The ndfleet_node modules `path` imports when it loads (not inside functions), each a dotted name."""
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    found: set[str] = set()
    for node in _load_time_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return {name for name in found if _module_file(name) is not None}


def import_closure(entries: list[str]) -> list[Path]:
    """The files of `entries` (dotted ndfleet_node modules) and of every ndfleet_node module they import when they
    load, directly or not, with the packages that hold them; sorted. ValueError for an entry that is no module of
    the package."""
    todo, seen = list(entries), set()
    for entry in entries:
        if _module_file(entry) is None:
            raise ValueError(f"{entry!r} is no module of the node program")
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # the module and every package above it (Python imports those first)
            path = _module_file(".".join(parts[:i]))
            if path is not None and path not in seen:
                seen.add(path)
                todo.extend(_imports(path))
    return sorted(seen)


def library(entries: tuple[str, ...]) -> bytes:
    """A machine without the node program (the Slurm controller) gets the modules it runs the same way: an
    archive of `entries` and what they import, stripped as in the zipapp, for its PYTHONPATH (`python3 -m
    ndfleet_node.slurm_reap` imports from a zip, docs.python.org/3/library/zipimport.html). Without the zipapp's
    `#!` line and `__main__.py`: it is a library, not a program."""
    return _library(tuple(sorted(entries)))


@functools.lru_cache(maxsize=4)
def _library(entries: tuple[str, ...]) -> bytes:
    return _archive(import_closure(list(entries)), app=False)


def source_lines() -> int:
    return sum(len(p.read_text().splitlines()) for p in source_files())
