"""The node program as shipped: standard library only, Python 3.10 syntax, a deterministic zipapp that runs
isolated from any site-packages; the shell kept for the tests' fake tools passes shellcheck."""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ndfleet.nodefiles import nodeapp

NODE_FILES = nodeapp.source_files()
SHELLCHECK = Path(sys.executable).with_name("shellcheck")
FAKES = Path(__file__).resolve().parents[1] / "fakes"
IMPORT_EVERY_MODULE = (
    "import importlib, pkgutil, sys; sys.path.insert(0, sys.argv[1]); import ndfleet_node; "
    "[importlib.import_module(m.name) for m in pkgutil.walk_packages(ndfleet_node.__path__, 'ndfleet_node.')]"
)


@pytest.mark.parametrize("path", NODE_FILES, ids=lambda p: str(p.relative_to(nodeapp.PACKAGE_DIR)))
def test_node_module_is_python_310_and_stdlib_only(path):
    tree = ast.parse(path.read_text(), feature_version=(3, 10))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"ndfleet_node"}, imported - set(sys.stdlib_module_names)


def test_zipapp_is_deterministic():
    nodeapp.build.cache_clear()
    first = nodeapp.build()
    nodeapp.build.cache_clear()
    assert nodeapp.build() == first


def test_strip_removes_only_comments_docstrings_and_blank_lines():
    source = (
        'def f():\n    """Doc."""\n    # comment\n    x = """a\n\nb"""  # trailing\n    return x\n\n\n'
        'class E(Exception):\n    """Only a docstring."""\n'
    )
    stripped = nodeapp.strip(source)
    assert stripped == 'def f():\n    x = """a\n\nb"""\n    return x\nclass E(Exception):\n    pass\n'
    one_line = 'class E(Exception): """Kept: it shares its line."""\nx = 1  # gone\n'
    assert nodeapp.strip(one_line) == 'class E(Exception): """Kept: it shares its line."""\nx = 1\n'
    namespace: dict[str, object] = {}
    exec(compile(stripped, "stripped", "exec"), namespace)  # noqa: S102 (our own source)
    assert namespace["f"]() == "a\n\nb"  # type: ignore[operator]


@pytest.mark.parametrize("command", [["--help"], ["validate", "--help"], ["setup", "--help"], ["health", "--help"]])
def test_zipapp_runs_isolated_from_site_packages(tmp_path, command):
    app = tmp_path / "ndfleet-node"
    app.write_bytes(nodeapp.build())
    # -I -S: no site-packages, no user site, no PYTHONPATH: only the standard library and the zipapp.
    out = subprocess.run([sys.executable, "-I", "-S", str(app), *command], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_every_module_imports_from_the_zipapp_with_the_standard_library_only(tmp_path):
    app = tmp_path / "ndfleet-node"
    app.write_bytes(nodeapp.build())
    out = subprocess.run([sys.executable, "-I", "-S", "-c", IMPORT_EVERY_MODULE, str(app)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr


def test_fake_tools_pass_shellcheck():
    scripts = [str(p) for p in sorted((FAKES / "bin").iterdir())] + [str(FAKES / "lib" / "common.sh")]
    out = subprocess.run([str(SHELLCHECK), *scripts], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_nodes_zipapp_leaves_out_what_only_the_controller_runs():
    # The elastic programs run on the controller from its own copies; in the nodes' userData they cost the headroom
    # under Azure's 64 KB limit (tests/test_bootstrap.py).
    nodeapp.build.cache_clear()
    names = zipfile.ZipFile(io.BytesIO(nodeapp.build())).namelist()
    assert "ndfleet_node/burnin/runner.py" in names  # the hostfile mode and the test runner the nodes run
    assert "ndfleet_node/burnin/slurm.py" not in names  # the burn-in's Slurm mode: the controller's timer
    assert not [n for n in names if n.startswith("ndfleet_node/elastic/")]
    assert "ndfleet_node/slurm_reap.py" not in names and "ndfleet_node/slurm_export.py" not in names
