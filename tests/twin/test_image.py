"""The twin's images against ndfleet's image contracts (ndfleet/images/*.json): the HPC image (compute nodes) has
every tool the contract lists at its path, or the twin says why not (tests/twin/image.py NOT_STOOD_IN); neither image
has what its contract lists as absent; only the HPC image has PMIx; all_reduce_perf needs HPC-X's libmpi to load."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ndfleet.images import COMPUTE_IMAGE, SERVER_IMAGE
from tests.twin.image import NOT_STOOD_IN, in_layer, twin_contract


def _exists(layers: list[Path], path: str) -> bool:
    return any(in_layer(layer, path).exists() or in_layer(layer, path).is_symlink() for layer in layers)


def test_the_hpc_image_has_every_contract_tool_at_its_path(twin_root: tuple[Path, Path, Path]) -> None:
    root, hpc, _ = twin_root
    c = twin_contract()
    stood_in = [t for t in c.tools if t.name not in NOT_STOOD_IN]
    missing = [f"{t.name} ({t.path})" for t in stood_in if not _exists([hpc, root], t.path)]
    assert not missing, f"the twin's HPC image lacks contract tools: {missing}"
    assert set(NOT_STOOD_IN) <= c.tool_names


def test_neither_image_has_what_its_contract_says_is_absent(twin_root: tuple[Path, Path, Path]) -> None:
    root, hpc, _ = twin_root
    path_dirs = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")
    for name, layers in ((COMPUTE_IMAGE, [hpc, root]), (SERVER_IMAGE, [root])):
        for absent in twin_contract(name).absent:
            paths = [absent.path] if absent.path else []
            paths += [f"{d}/{absent.name}" for d in path_dirs]
            found = [p for p in paths if _exists(layers, p)]
            assert not found, f"{name}: the contract says {absent.name} is absent, the twin has {found}"


def test_only_the_hpc_image_has_pmix(twin_root: tuple[Path, Path, Path]) -> None:
    root, hpc, _ = twin_root
    assert list(hpc.glob("usr/lib/x86_64-linux-gnu/libpmix.so.2*")), "the HPC image's layer has no PMIx"
    assert not list(root.glob("usr/lib/x86_64-linux-gnu/libpmix.so*")), "the plain image has PMIx"
    assert not list(root.glob("opt/hpcx-*")), "the plain image has HPC-X"


def test_all_reduce_perf_loads_only_with_hpcx_libraries(twin_root: tuple[Path, Path, Path]) -> None:
    _, hpc, _ = twin_root
    tool = twin_contract().tool("all_reduce_perf")
    assert tool is not None
    binary = in_layer(hpc, tool.path)
    dynamic = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True, check=True).stdout
    assert "Shared library: [libmpi.so.40]" in dynamic
    assert "[$ORIGIN:$ORIGIN/verifiable]" in dynamic  # nccl-tests' rpath, nothing of HPC-X's
    # The loader, as on a node without HPC-X loaded (run here, outside the machine: the message is the loader's).
    cp = subprocess.run([str(binary)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert cp.returncode == 127
    assert "libmpi.so.40: cannot open shared object file" in cp.stderr
