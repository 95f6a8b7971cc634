"""One twin machine: an overlay of the shared root, a NoCloud seed holding exactly the plan's boot data, and
systemd-nspawn booting it with systemd as PID 1 on the twin's bridge.

Only what stands in for Azure or the hardware is written into the machine before it boots: the NoCloud seed
(Azure's data source), the address (Azure's DHCP), /etc/hosts (Azure's DNS), the archive's apt source (the image's),
and the hardware stand-in (tests/twin/fakes/hardware.c and hw-boot.sh, installed by tests/twin/twin.py). Nothing of
ndfleet's is copied in.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.twin.plan import Machine

NSPAWN_REBOOT_EXIT = 133
PR_SET_PDEATHSIG = 1  # linux/prctl.h  # systemd-nspawn(1): the container asked to reboot


class BootError(AssertionError):
    pass


class TwinMachine:
    def __init__(
        self, spec: Machine, lowers: list[Path], workdir: Path, bridge: str, binds: list[str], devices: list[str] = ()
    ):
        self.spec = spec
        self.name = spec.name
        self.lowers = lowers
        self.dir = workdir / spec.name
        self.upper = self.dir / "upper"
        self.root = self.dir / "root"
        self.bridge = bridge
        self.binds = binds
        self.devices = list(devices)  # "HOST_DEVICE:PATH_IN_MACHINE", e.g. an attached data disk
        self.console = self.dir / "console.log"
        self.proc: subprocess.Popen | None = None
        self.boots = 0
        self.frozen = False

    # --- before the first boot -------------------------------------------------------------------------------
    def prepare(self, files: dict[str, tuple[bytes, int]]) -> None:
        """Create the overlay and write the stand-in files (path in the machine -> (content, mode))."""
        for d in (self.upper, self.dir / "work", self.root):
            d.mkdir(parents=True, exist_ok=True)
        for path, (content, mode) in files.items():
            target = self.upper / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            target.chmod(mode)
        lower = ":".join(str(p) for p in self.lowers)
        subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={lower},upperdir={self.upper},workdir={self.dir / 'work'}", str(self.root)],
            check=True,
        )  # fmt: skip

    # --- power -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} is running"
        self.boots += 1
        cmd = [
            "systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--boot",
            f"--directory={self.root}", f"--machine={self.name}", f"--hostname={self.name}",
            f"--network-bridge={self.bridge}", "--resolv-conf=off", "--timezone=off", "--link-journal=no",
            "--capability=all",
            *[f"--bind-ro={b}" for b in self.binds],
            *[f"--bind={d}" for d in self.devices],
        ]  # fmt: skip
        log = self.console.open("ab")
        log.write(f"\n===== boot {self.boots} =====\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, preexec_fn=die_with_parent
        )

    def leader(self) -> int:
        """The host PID of the machine's PID 1 (systemd)."""
        assert self.proc is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for pid in _descendants(self.proc.pid):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                nspid = next((ln.split()[1:] for ln in status.splitlines() if ln.startswith("NSpid:")), [])
                if len(nspid) >= 2 and nspid[-1] == "1":
                    return pid
            if self.proc.poll() is not None:
                raise BootError(f"{self.name}: systemd-nspawn exited {self.proc.returncode}\n{self.tail()}")
            time.sleep(0.2)
        raise BootError(f"{self.name}: no PID 1 found\n{self.tail()}")

    def poweroff(self, timeout: float = 120) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.frozen:  # a hung guest takes no power-off request: Azure stops the VM from outside
            self.kill()
            return
        os.kill(self.proc.pid, signal.SIGTERM)  # nspawn asks the container's systemd to power off
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def reboot(self, timeout: float = 180) -> None:
        """`systemctl reboot` inside; nspawn exits 133 and is started again (as systemd-nspawn@.service does)."""
        assert self.proc is not None
        self.run("systemctl reboot", check=False, timeout=30)
        code = self.proc.wait(timeout)
        if code != NSPAWN_REBOOT_EXIT:
            raise BootError(f"{self.name}: reboot ended nspawn with {code}\n{self.tail()}")
        self.start()

    def freeze(self) -> None:
        """The guest stops answering, as a VM whose kernel hangs does: every process of the machine, its systemd
        included, is stopped (SIGSTOP from the host). Connections to its ports are still accepted by the kernel (the
        listen backlog) and never answered, so slurmctld's pings and the health probe run into their timeouts, as on
        a hung VM; nothing inside can report anything."""
        assert self.proc is not None
        for pid in _descendants(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        self.frozen = True

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.root)], check=False, capture_output=True)

    # --- inside ----------------------------------------------------------------------------------------------
    def run(self, command: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a shell command in the machine (all its namespaces), as root."""
        pid = self.leader()
        cp = subprocess.run(
            ["nsenter", f"--target={pid}", "--mount", "--uts", "--ipc", "--net", "--pid", "--cgroup", "--",
             "/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "/bin/sh", "-c", command],
            capture_output=True, text=True, timeout=timeout, errors="replace",
        )  # fmt: skip
        if check and cp.returncode != 0:
            raise AssertionError(f"{self.name}: `{command}` exited {cp.returncode}\n{cp.stdout}\n{cp.stderr}")
        return cp

    def unit_state(self, unit: str) -> str:
        return self.run(f"systemctl is-active {shlex.quote(unit)}", check=False).stdout.strip()

    def prop(self, unit: str, name: str) -> str:
        return self.run(f"systemctl show -p {name} --value {shlex.quote(unit)}", check=False).stdout.strip()

    def seconds_since_boot(self, unit: str, prop: str = "ActiveEnterTimestampMonotonic") -> float:
        """When `unit` entered the state, in seconds after this boot's systemd started."""
        start = int(self.run("systemctl show -p UserspaceTimestampMonotonic --value").stdout.strip() or 0)
        return (int(self.prop(unit, prop) or 0) - start) / 1e6

    def journal(self, unit: str, lines: int = 60) -> str:
        return self.run(f"journalctl -b -u {shlex.quote(unit)} --no-pager -n {lines}", check=False).stdout

    def pid1_cannot_spawn(self) -> bool:
        """Whether the machine's systemd has lost the ability to start processes: "Failed to spawn executor: No
        such file or directory" for every unit from some point on. Seen once in the twin (Debian trixie's systemd 257,
        which starts each unit through its pinned systemd-executor, in a container on this cgroup-v1 host), right
        after a daemon-reload; a real node (Ubuntu 22.04, systemd 249, no executor) cannot fail this way."""
        command = "journalctl -b --no-pager -o cat | grep -m 1 'Failed to spawn executor'"
        out = self.run(command, check=False, timeout=30)
        return "Failed to spawn executor" in out.stdout

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float, units: tuple[str, ...] = ()) -> None:
        deadline = time.monotonic() + timeout
        next_health_check = time.monotonic() + 30
        rebooted = False
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except (AssertionError, subprocess.TimeoutExpired, BootError):
                pass
            if self.proc is not None and self.proc.poll() is not None:
                break
            if not rebooted and time.monotonic() >= next_health_check:
                next_health_check = time.monotonic() + 30
                with contextlib.suppress(subprocess.TimeoutExpired, BootError):
                    if self.pid1_cannot_spawn():
                        # The container's systemd, not ndfleet, is broken: reboot the machine once, loudly, as an
                        # operator would, and wait on (the node validates again at boot).
                        print(f"twin: {self.name}: its systemd cannot start processes (Failed to spawn executor); "
                              "rebooting it once", flush=True)  # fmt: skip
                        rebooted = True
                        self.reboot()
            time.sleep(2)
        detail = (
            "\n".join(f"--- {u}\n{self.journal(u)}" for u in units) if self.proc and self.proc.poll() is None else ""
        )
        raise AssertionError(
            f"{self.name}: timed out after {timeout:.0f} s waiting for {what}\n{detail}\n{self.tail()}"
        )

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.console.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def die_with_parent() -> None:
    """In a child before exec: SIGKILL when the twin's process dies, however it dies (prctl PR_SET_PDEATHSIG), so
    no machine outlives a killed test run (systemd-nspawn takes its container with it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            # A process can exit between being listed as a child and being read: then it has no children to list.
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(k) for k in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out
