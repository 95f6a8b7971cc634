"""The twin's hardware stand-in for a VM's processors (tests/twin/twin.py hwloc_shape, tests/twin/fakes/hardware.c),
run here without booting anything: the real slurmd counts the VM size's shape through hwloc, and the library folds
the VM's CPU numbers onto the host's where the kernel checks them (a task's affinity, a cgroup's cpuset.cpus)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from ndfleet.stackconfig.profiles import PROFILES
from tests.slurm.sandbox import SANDBOX_USER
from tests.system_tools import require_tools
from tests.twin.twin import hwloc_shape

HARDWARE_C = Path(__file__).resolve().parent / "twin" / "fakes" / "hardware.c"
SIZE = "Standard_ND96isr_H100_v5"


@pytest.fixture(scope="module")
def hardware_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (cc,) = require_tools("cc")
    out = tmp_path_factory.mktemp("twin-hw") / "hardware.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(HARDWARE_C), "-ldl"], check=True, timeout=120)
    return out


def test_slurmd_reports_the_vm_sizes_shape_not_the_hosts() -> None:
    slurmd, unshare = require_tools("slurmd", "unshare")
    key, _, value = hwloc_shape(SIZE).partition("=")
    # As an unprivileged user of a namespace of its own: slurmd as root drops supplementary groups, which a user
    # namespace (the suite's `unshare -rn`) refuses.
    user = pwd.getpwnam(SANDBOX_USER)
    cmd = [unshare, "--user", f"--map-user={user.pw_uid}", f"--map-group={user.pw_gid}", slurmd, "-C"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, key: value})
    p = PROFILES[SIZE]
    expected = (f"CPUs={p.vcpus} Boards=1 SocketsPerBoard={p.sockets} CoresPerSocket={p.cores_per_socket} "
                f"ThreadsPerCore={p.threads_per_core} ")  # fmt: skip
    assert expected in out.stdout, out.stdout + out.stderr


PROBE = """
import os, sys
os.sched_setaffinity(0, {int(sys.argv[2])})
print(sorted(os.sched_getaffinity(0)))
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
print(os.write(fd, b"0-95"))
os.close(fd)
"""


def test_the_vms_cpu_numbers_are_folded_onto_the_hosts(hardware_lib: Path, tmp_path: Path) -> None:
    host_cpus = sorted(os.sched_getaffinity(0))
    if host_cpus != list(range(len(host_cpus))):
        pytest.skip(f"the host's usable CPUs are not 0..n-1: {host_cpus}")
    n = len(host_cpus)
    cpuset = tmp_path / "cpuset.cpus"
    other = tmp_path / "other"
    env = {**os.environ, "LD_PRELOAD": str(hardware_lib)}
    vm_cpu = 95  # the last CPU of a 96-vCPU VM: no such CPU on the host unless it has 96
    out = subprocess.run([sys.executable, "-c", PROBE, str(cpuset), str(vm_cpu)], capture_output=True, text=True,
                         timeout=60, env=env, check=True).stdout.split("\n")  # fmt: skip
    assert out[0] == str([vm_cpu % n])
    assert out[1] == "4"  # the caller is told its whole text was written
    assert cpuset.read_text() == ",".join(str(i) for i in range(n)) + "\n"
    # Any other file is written as it is.
    subprocess.run([sys.executable, "-c", PROBE, str(other), "0"], timeout=60, env=env, check=True,
                   capture_output=True)  # fmt: skip
    assert other.read_text() == "0-95"
