"""A fake ND H100 v5 node for the validator: fake tools on a hermetic PATH and a fake /sys + /proc tree.

The fake tools (tests/fakes/bin) print what the real ones print on 8 x H100 + 8 x ConnectX-7; the faults in
NDFLEET_FAKE_FAULTS make one of them misbehave. Sysroot faults change the fake tree instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

FAKES = Path(__file__).resolve().parent
FAKE_BIN = FAKES / "bin"
# HPC-X as the Azure HPC image lays it out (hpcx-init.sh with hpcx_load; its ompi/lib holds libmpi.so.40, without which
# the fake all_reduce_perf and nvbandwidth do not start, as the real ones do not): the node JSON's burnin.hpcx_init.
FAKE_HPCX_INIT = FAKES / "hpcx" / "hpcx-init.sh"

# What the validator itself needs from the base system (everything else must come from the fakes).
SYSTEM_TOOLS = (
    "sh", "bash", "env", "awk", "grep", "head", "readlink", "dirname", "mkdir", "rm", "sleep", "cat", "sed", "tr",
    "touch", "ls",
)  # fmt: skip

# Faults the fake tools inject (environment) and the ones the fake tree carries (sysroot).
TOOL_FAULTS = frozenset(
    "gpu_missing ecc_uncorrectable row_remap_pending nvlink_down gpu_pcie_x8 thermal nvsmi_hang ib_port_down "
    "ib_rate_200 hca_pcie_x8 fm_inactive xid79 xid94 xid95 ib_flap nccl_low ib_bw_low h2d_low dcgm_fail".split()
)
SYSROOT_FAULTS = frozenset("peermem_absent ib_flap nvme_missing memory_low cpu_low lustre_unmounted".split())
# Faults of the set-up fakes (mount, blobfuse2, systemctl, apt-get).
# apt_flaky, apt_down: the fake apt-get (BlobFuse2 installed at set-up).
SETUP_FAULTS = frozenset("lustre_down lustre_flaky blob_fail fm_stopped dcgm_installed apt_flaky apt_down".split())

HCA_BDFS = [f"01{i + 1:02d}:00:00.0" for i in range(8)]
BASE_MOUNTS = ("/dev/sda1 / ext4 rw,relatime,discard 0 0", "tmpfs /run tmpfs rw,nosuid,nodev,size=195338456k 0 0")
GIB_KB = 1024 * 1024


def build_sysroot(root: Path, mounts: Iterable[str], faults: Iterable[str] = ()) -> Path:
    """A /proc and /sys tree of a healthy 96-vCPU ND H100 v5 node, with the given sysroot faults."""
    faults = set(faults)
    unknown = faults - SYSROOT_FAULTS - TOOL_FAULTS - SETUP_FAULTS
    assert not unknown, f"unknown faults {unknown}"
    proc = root / "proc"
    proc.mkdir(parents=True)
    modules = ["nvidia_uvm 1531904 0 - Live 0x0000000000000000 (POE)"]
    if "peermem_absent" not in faults:
        modules.append("nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)")
    modules += [
        "nvidia 56623104 110 nvidia_uvm,nvidia_peermem, Live 0x0000000000000000 (POE)",
        "mlx5_ib 471040 0 - Live 0x0000000000000000 (OE)",
        "mlx5_core 2424832 1 mlx5_ib, Live 0x0000000000000000 (OE)",
    ]
    (proc / "modules").write_text("\n".join(modules) + "\n")
    for i in range(7 if "nvme_missing" in faults else 8):
        (root / "dev").mkdir(exist_ok=True)
        (root / "dev" / f"nvme{i}n1").touch()
    mem_gib = 1430 if "memory_low" in faults else 1866
    (proc / "meminfo").write_text(
        f"MemTotal:       {mem_gib * GIB_KB} kB\nMemFree:        {(mem_gib - 20) * GIB_KB} kB\n"
        f"MemAvailable:   {(mem_gib - 25) * GIB_KB} kB\n"
    )
    cpus = 48 if "cpu_low" in faults else 96
    (proc / "cpuinfo").write_text(
        "".join(
            f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n\n"
            for i in range(cpus)
        )
    )
    lines = list(BASE_MOUNTS)
    for m in mounts:
        if m == "/mnt/lustre":
            if "lustre_unmounted" not in faults:
                lines.append("10.50.2.4@tcp:/lustrefs /mnt/lustre lustre rw,flock,lazystatfs 0 0")
        elif m.startswith("/mnt/blob/"):
            lines.append(f"blobfuse2 {m} fuse rw,nosuid,nodev,relatime,user_id=0,group_id=0,allow_other 0 0")
        else:
            lines.append(f"/dev/md127 {m} xfs rw,noatime,attr2,inode64,logbufs=8,logbsize=32k,noquota 0 0")
    (proc / "mounts").write_text("\n".join(lines) + "\n")

    sys_ = root / "sys"
    for i in range(7 if "nvme_missing" in faults else 8):
        (sys_ / "block" / f"nvme{i}n1").mkdir(parents=True)
    (sys_ / "block" / "sda").mkdir(parents=True)
    for i, bdf in enumerate(HCA_BDFS):
        dev = sys_ / "devices" / f"pci{bdf[:4]}:00" / bdf
        dev.mkdir(parents=True)
        ca = sys_ / "class" / "infiniband" / f"mlx5_ib{i}"
        counters = ca / "ports" / "1" / "counters"
        counters.mkdir(parents=True)
        (ca / "device").symlink_to(os.path.relpath(dev, ca))
        downed = 12 if ("ib_flap" in faults and i == 3) else 0
        (counters / "link_downed").write_text(f"{downed}\n")
    return root


def hermetic_path(bindir: Path, missing: Iterable[str] = ()) -> str:
    """A PATH with the fake tools (less `missing`) and only the base tools the validator needs."""
    missing = set(missing)
    bindir.mkdir(parents=True)
    for tool in sorted(FAKE_BIN.iterdir()):
        if tool.name not in missing:
            (bindir / tool.name).symlink_to(tool)
    for name in SYSTEM_TOOLS:
        found = shutil.which(name)
        assert found, f"base tool {name} is not installed"
        if name not in missing and not (bindir / name).exists():
            (bindir / name).symlink_to(found)
    # The node's python3 (the zipapp's interpreter): the one running the tests.
    (bindir / "python3").symlink_to(sys.executable)
    return str(bindir)


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    seconds: float
    report: dict | None

    @property
    def failed(self) -> set[str]:
        assert self.report is not None, f"no report; rc={self.rc}\n{self.stdout}\n{self.stderr}"
        return {c["id"] for c in self.report["checks"] if c["status"] == "fail"}

    def check(self, check_id: str) -> dict:
        assert self.report is not None
        return next(c for c in self.report["checks"] if c["id"] == check_id)


def write_bundle(folder: Path, files: dict[str, tuple[bytes, int]]) -> Path:
    """`ndfleet render`'s output for one island (render_output_files) as files: validate-node, ndfleet-node, ..."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, (data, mode) in files.items():
        (folder / name).write_bytes(data)
        (folder / name).chmod(mode)
    return folder


def _json_object(path: Path) -> dict | None:
    """The JSON object in `path`, or None (no file, not JSON, not an object: a test of a broken node JSON)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def run_validator(
    bundle: Path,
    workdir: Path,
    level: str = "quick",
    faults: Iterable[str] = (),
    mounts: Iterable[str] = (),
    missing: Iterable[str] = (),
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
    timeout: float = 60,
    sysroot: Path | None = None,
    bindir: Path | None = None,
    hpcx_init: str | None = str(FAKE_HPCX_INIT),
) -> Run:
    """The rendered validator on the fake node. `hpcx_init` replaces the node JSON's burnin.hpcx_init (the glob of
    HPC-X's hpcx-init.sh; default: the fake HPC-X tree; None keeps the rendered value, the image's /opt/hpcx-*)."""
    faults = list(faults)
    sysroot = sysroot or build_sysroot(workdir / "root", mounts, faults)
    path = str(bindir) if bindir else hermetic_path(workdir / "bin", missing)
    report = workdir / "out" / "report.json"
    node_json = bundle / "node.json"
    doc = _json_object(node_json) if hpcx_init is not None else None
    if doc is not None and isinstance(doc.get("burnin"), dict):
        doc["burnin"]["hpcx_init"] = hpcx_init
        node_json = workdir / "node.json"
        workdir.mkdir(parents=True, exist_ok=True)
        node_json.write_text(json.dumps(doc))
    environ = {
        "PATH": path,
        "NDFLEET_NODE_CONFIG": str(node_json),
        "NDFLEET_SYSROOT": str(sysroot),
        "NDFLEET_FAKES": str(FAKES),
        "NDFLEET_FAKE_FAULTS": ",".join(faults),
        **(env or {}),
    }
    # As systemd runs it: the validate-node wrapper, which runs the ndfleet-node zipapp with python3.
    argv = [str(bundle / "validate-node"), *(args if args is not None else ["--level", level, "--report", str(report)])]
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.monotonic() - t0
    data = json.loads(report.read_bytes().decode("utf-8")) if report.is_file() else None
    return Run(proc.returncode, proc.stdout, proc.stderr, seconds, data)


def reboot(root: Path) -> None:
    """What a reboot does to the fake node: /run, /dev/md and the mounts are gone, modules reload from
    modules-load.d; the NVMe disks keep their RAID superblock and file system (var/fake)."""
    shutil.rmtree(root / "run", ignore_errors=True)
    shutil.rmtree(root / "dev" / "md", ignore_errors=True)
    (root / "proc" / "mounts").write_text("\n".join(BASE_MOUNTS) + "\n")
    modules = [ln for ln in (root / "proc" / "modules").read_text().splitlines() if not ln.startswith("nvidia_peermem")]
    if (root / "etc" / "modules-load.d" / "ndfleet-peermem.conf").exists():
        modules.append("nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)")
    (root / "proc" / "modules").write_text("\n".join(modules) + "\n")


def reimage(root: Path) -> None:
    """A reimage: a fresh OS disk (no /etc state) and empty NVMe disks (no superblock, no file system)."""
    reboot(root)
    for name in ("md-superblock", "xfs"):
        (root / "var" / "fake" / name).unlink(missing_ok=True)
    shutil.rmtree(root / "etc", ignore_errors=True)
    shutil.rmtree(root / "mnt", ignore_errors=True)


def calls(root: Path) -> list[str]:
    """Every call the set-up fakes logged, in order."""
    log = root / "var" / "fake" / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def run_setup(bundle: Path, root: Path, bindir: Path, faults: Iterable[str] = (), timeout: float = 120) -> Run:
    """`ndfleet-node setup` as its unit runs it (python3 and the zipapp), against the fake node at `root`."""
    environ = {
        "PATH": str(bindir),
        "NDFLEET_SYSROOT": str(root),
        "NDFLEET_FAKES": str(FAKES),
        "NDFLEET_FAKE_FAULTS": ",".join(faults),
    }
    # ndfleet's apt lock lives in the machine's /run, not in the hardware tree: here, in the fake node's.
    config_path = bundle / "node.json"
    try:
        config = json.loads(config_path.read_text())
        config["paths"]["apt_lock"] = str(root / "run" / "ndfleet" / "apt.lock")
        config_path = root / "node.json"
        config_path.write_text(json.dumps(config))
    except (ValueError, KeyError, TypeError):
        pass  # a node JSON the test broke on purpose: the set-up reads it as it is
    argv = [sys.executable, str(bundle / "ndfleet-node"), "setup", "--config", str(config_path)]
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.monotonic() - t0
    results = root / "run" / "ndfleet" / "setup.json"
    data = json.loads(results.read_text()) if results.exists() else None
    return Run(proc.returncode, proc.stdout, proc.stderr, seconds, data)
