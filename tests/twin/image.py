"""The twin's images, built from ndfleet's image contracts (ndfleet/images/*.json), not from what ndfleet expects.

Two images, as on Azure:
- the plain image (`ubuntu-server-2204`: the controller and login nodes) is the debootstrapped root itself, which
  has no HPC-X, no PMIx, no GPU or InfiniBand tools;
- the HPC image (`ubuntu-hpc-2204` at the version the twin's stack pins, `ndfleet:image` in Pulumi.twin.yaml:
  `twin_contract()`) is that root plus one overlay layer (`hpc-<stamp>`) holding what that version's contract says
  the HPC image adds, at the contract's paths: the hardware stand-ins (tests/fakes, real
  executables reading a fake /proc and /sys), HPC-X's tree with its `hpcx-init.sh` and a stand-in `libmpi.so.40`
  in `ompi/lib` only, nccl-tests' `all_reduce_perf` as a real ELF linked against that library with an rpath of only
  `$ORIGIN:$ORIGIN/verifiable` (NVIDIA/nccl-tests src/Makefile), so that without HPC-X loaded it fails with the
  loader's own message and exit 127, as on Azure; PMIx (installed into the layer by build-root.sh); the fabric
  manager's unit. The image's boot service that rewrites /etc/nccl.conf (`sku-customizations.service`) is not stood
  in: the node set-up's ordering after it is checked in the rendered unit (tests/images/test_image_versions.py).
  Tools the contract lists as absent (nvbandwidth, blobfuse2) are not there.

`python3 -m tests.twin.image hpc-layer DIR` writes the files into DIR (build-root.sh runs it);
`stood_in(contract)` says for each contract tool where the twin has it or why it does not (tests/twin/test_image.py
holds the built roots to the contract).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ndfleet.images import COMPUTE_IMAGE, SERVER_IMAGE, Environment, ImageContract, for_image
from ndfleet.images import load as contract

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FAKES = REPO / "tests" / "fakes"
STACK_FILE = HERE / "Pulumi.twin.yaml"
HW_DIR = "/opt/twin-hw"  # where the fake tools live in the HPC layer; the contract's paths link here

# Contract tools of the HPC image the twin does not stand in, and why (every other one must exist in the layer).
NOT_STOOD_IN = {
    "mount.lustre": "the twin's stack has no Managed Lustre",
}
# Contract tools whose stand-in is one of tests/fakes/bin (a shell script reading the fake /proc and /sys).
FAKE_TOOLS = ("nvidia-smi", "dcgmi", "ibstat", "ib_write_bw", "lspci", "mdadm", "mkfs.xfs")


def twin_image_urn() -> str:
    """The compute image the twin's stack names (`ndfleet:image`), read with the standard library only: build-root.sh
    runs this module with the host's python3. The twin's stack must pin one: the twin models a version's contract."""
    found = re.findall(r"^  ndfleet:image:\s*(\S+)\s*$", STACK_FILE.read_text(encoding="utf-8"), re.MULTILINE)
    if len(found) != 1:
        raise SystemExit(f"{STACK_FILE}: ndfleet:image must be set once, to a pinned image with a contract; "
                         f"it is set {len(found)} times")
    return found[0]


def twin_contract(name: str = COMPUTE_IMAGE) -> ImageContract:
    """The contract the twin builds image `name` from: for the HPC image, that of the version its stack pins (a
    version without a contract is refused: the twin would model a build nobody has read); the plain image has one."""
    if name == SERVER_IMAGE:
        return contract(SERVER_IMAGE)
    c, why = for_image(twin_image_urn(), name)
    if why:
        raise SystemExit(f"tests/twin/Pulumi.twin.yaml: {why}")
    return c


def hpcx(c: ImageContract) -> Environment:
    return c.environments["hpcx"]


# A stand-in for HPC-X's libmpi.so.40: the soname is what matters to the loader.
_LIBMPI_C = "int MPI_Init(int *argc, char ***argv) { (void)argc; (void)argv; return 0; }\n"
# nccl-tests' all_reduce_perf: needs libmpi.so.40 (an MPI=1 build), then is the twin's multi-node stand-in.
_ALL_REDUCE_C = r"""
#include <unistd.h>
int MPI_Init(int *argc, char ***argv);
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    argv[0] = "all_reduce_perf";
    execv("/opt/twin-hw/fakes/bin/all_reduce_perf-twin", argv);
    return 127;
}
"""
# HPC-X's hpcx-init.sh defines hpcx_load, which puts HPC-X's bin on PATH and its lib dirs on LD_LIBRARY_PATH
# (HPC-X README, "Loading HPC-X without modules"); this one does the same for the contract's lib dirs.
_HPCX_INIT = """# twin stand-in for HPC-X's hpcx-init.sh (contract: ndfleet/images, the twin stack's version)
export HPCX_DIR={home}
hpcx_load() {{
  export HPCX_MPI_DIR=$HPCX_DIR/ompi
  export PATH=$HPCX_MPI_DIR/bin${{PATH:+:$PATH}}
  export LD_LIBRARY_PATH={lib_path}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}
}}
hpcx_unload() {{ :; }}
"""
_FABRICMANAGER_UNIT = """[Unit]
Description=NVIDIA fabric manager (twin stand-in: no NVSwitches to manage)
[Service]
ExecStart=/bin/sleep infinity
[Install]
WantedBy=multi-user.target
"""


def in_layer(layer: Path, path: str) -> Path:
    """Where an image path lives in a layer. Debian's root (trixie, as Ubuntu's) has merged /usr: /bin, /sbin and
    /lib are links into /usr, and a real directory of that name in an overlay layer would hide the link."""
    for top in ("/bin/", "/sbin/", "/lib/", "/lib64/"):
        if path.startswith(top):
            path = "/usr" + path
    return layer / path.lstrip("/")


def _cc(args: list[str]) -> None:
    cp = subprocess.run(["cc", *args], capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"cc {' '.join(args)}:\n{cp.stderr}")


def write_hpc_layer(layer: Path) -> None:
    """The HPC image's additions (files only; build-root.sh installs PMIx into the same layer)."""
    c = twin_contract()
    env = hpcx(c)
    tools = {t.name: t for t in c.tools}
    hw = layer / HW_DIR.lstrip("/")
    (hw / "fakes").mkdir(parents=True, exist_ok=True)
    shutil.copytree(FAKES / "bin", hw / "fakes" / "bin", dirs_exist_ok=True)
    shutil.copytree(FAKES / "lib", hw / "fakes" / "lib", dirs_exist_ok=True)
    # Beside the other fakes, whose common.sh it sources.
    shutil.copy(HERE / "fakes" / "all_reduce_perf", hw / "fakes" / "bin" / "all_reduce_perf-twin")
    for f in (hw / "fakes" / "bin").iterdir():
        f.chmod(0o755)

    def link(target: str, path: str) -> None:
        p = in_layer(layer, path)
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():
            p.unlink()
        p.symlink_to(target)

    for name in FAKE_TOOLS:
        link(f"{HW_DIR}/fakes/bin/{name}", tools[name].path)

    # HPC-X: its tree, its init script, its libmpi in ompi/lib only.
    home = layer / env.home.lstrip("/")
    libdirs = [layer / d.lstrip("/") for d in env.lib_dirs]
    for d in libdirs:
        d.mkdir(parents=True, exist_ok=True)
    (home / "ompi" / "bin").mkdir(parents=True, exist_ok=True)
    # HPC-X's mpirun, for a run on this machine alone (the validator's all-reduce: one rank per GPU): the twin's
    # burn-in runs in Slurm mode (srun with PMIx), and hostfile mode's mpirun is proven by tests/burnin.
    link(f"{HW_DIR}/fakes/lib/mpirun-local", tools["mpirun"].path)
    (layer / env.init.lstrip("/")).write_text(_HPCX_INIT.format(home=env.home, lib_path=":".join(env.lib_dirs)))
    mpi_lib = next(lib for lib in c.libraries if lib.name == "libmpi.so.40")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "libmpi.c"
        src.write_text(_LIBMPI_C)
        target = layer / mpi_lib.path.lstrip("/")
        _cc(["-shared", "-fPIC", "-Wl,-soname,libmpi.so.40", "-o", str(target), str(src)])
        main = Path(tmp) / "all_reduce_perf.c"
        main.write_text(_ALL_REDUCE_C)
        arp = layer / tools["all_reduce_perf"].path.lstrip("/")
        arp.parent.mkdir(parents=True, exist_ok=True)
        # Linked against the library (DT_NEEDED: its soname, libmpi.so.40); the binary carries only nccl-tests' rpath.
        _cc(["-o", str(arp), str(main), str(target), "-Wl,-rpath,$ORIGIN:$ORIGIN/verifiable"])

    unit = in_layer(layer, tools["nvidia-fabricmanager"].path)
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(_FABRICMANAGER_UNIT)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "hpc-layer":
        write_hpc_layer(Path(argv[1]))
        return 0
    print("usage: python3 -m tests.twin.image hpc-layer DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
