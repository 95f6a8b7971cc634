"""A throw-away Slurm cluster for tests: munged, slurmctld and one slurmd per compute node, from ndfleet's config.

Everything runs inside private namespaces that `unshare` creates (user, network, mount, UTS, PID), so the test
works the same under `unshare -rn pytest` (root in a user namespace, loopback only) and without it:
- the daemons run as the unprivileged user the namespace maps us to (`daemon`): Slurm then skips the
  `setgroups` call that a user namespace created with `unshare -r` forbids, and nothing runs as real root;
- the network has no way out: a bridge with no uplink, the controller on it, and one network + UTS namespace per
  compute node with its own host name (a dynamic node registers under its host name) and its own slurmd port;
- killing the namespace's PID 1 ends every daemon (no process outlives the test).
The configuration is ndfleet's (`ndfleet.slurm.conf`), with only paths, users and the cgroup-based plugins
(which need a real cgroup hierarchy) replaced; every such replacement is listed in `sandbox_site`. A Slurm older than
the one ndfleet installs gets the settings that give it the newer release's default behaviour
(`with_older_release_equivalents`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ndfleet.slurm.conf import SlurmSite, config_files, slurmd_args

REPO = Path(__file__).resolve().parents[2]
SETUP = Path(__file__).with_name("sandbox_setup.sh")
CONTROLLER_ADDR = "10.99.0.1"
SANDBOX_USER = "daemon"
START_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 60.0

FAKE_VALIDATOR = """#!{python}
# Fake quick validation: fails the check named in FAULTS/<host name>, if that file exists.
import json, socket, sys
from pathlib import Path

report = Path(sys.argv[sys.argv.index("--report") + 1])
fault = Path("{faults}") / socket.gethostname()
check = fault.read_text().strip() if fault.exists() else ""
status = "fail" if check else "pass"
doc = {{"status": "unhealthy" if check else "healthy", "level": "quick",
        "checks": [{{"id": check or "gpu.count", "status": status, "value": 1, "expected": 0, "message": ""}}]}}
report.write_text(json.dumps(doc) + "\\n")
sys.exit(1 if check else 0)
"""

HEALTH_WRAPPER = """#!/bin/sh
# The HealthCheckProgram slurmd runs: ndfleet-node slurm-health with the fake validator.
export PYTHONPATH={node_path} SLURM_CONF={slurm_conf}
exec {python} -m ndfleet_node slurm-health --validator {validator} --report {reports}/$(hostname).json \\
  --validate-timeout 30 --scontrol-timeout 30 --drain-marker {reports}/$(hostname).drained \\
  --burnin-marker {reports}/$(hostname).burnin-queued
"""


class SandboxError(RuntimeError):
    pass


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = START_TIMEOUT_S, interval_s: float = 0.2) -> Any:
    """Poll `probe` until it returns something truthy; raise naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    raise SandboxError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


# What the sandbox runs (tests/system-packages.txt names their packages; tests/system_tools.py skips or fails).
SANDBOX_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "unshare", "nsenter", "ip")


class SlurmSandbox:
    def __init__(self, root: Path, site: SlurmSite, nodes: dict[str, str]) -> None:
        """`nodes`: node name (its host name) -> island."""
        self.root = root
        self.nodes = nodes
        self.addrs = {name: f"10.99.0.{10 + i}" for i, name in enumerate(nodes)}
        for sub in ("etc", "munge", "state", "log", "run", "spool", "dev", "bin", "faults", "reports", "jobs"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        for name in nodes:
            (root / "spool" / name).mkdir(exist_ok=True)
        self.site = sandbox_site(site, root)
        self.slurm_conf = root / "etc" / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.slurm_conf)}
        self.holder: subprocess.Popen[bytes] | None = None
        self.init_pid = 0
        self.node_pids: dict[str, int] = {}
        self.daemons: list[subprocess.Popen[bytes]] = []

    # --- files

    def write_files(self) -> None:
        for i in range(self.site.gpus_per_node):
            # slurmd wants character devices; a user namespace cannot create one, so each fake GPU is /dev/null.
            (self.root / "dev" / f"nvidia{i}").symlink_to("/dev/null")
        for name, content in config_files(self.site).items():
            if name == "slurm.conf":
                content = with_older_release_equivalents(content, installed_slurm_release())
            (self.root / "etc" / name).write_text(content)
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        validator = self.root / "bin" / "fake-validate-node"
        validator.write_text(FAKE_VALIDATOR.format(faults=self.root / "faults", python=sys.executable))
        wrapper = Path(self.site.health_check_program)
        wrapper.write_text(
            HEALTH_WRAPPER.format(
                node_path=REPO / "node", slurm_conf=self.slurm_conf, python=sys.executable, validator=validator,
                reports=self.root / "reports",
            )
        )
        for script in (validator, wrapper):
            script.chmod(0o755)
        self.root.chmod(0o755)

    # --- namespaces

    def start(self) -> None:
        self.write_files()
        uid = pwd.getpwnam(SANDBOX_USER)
        cmd = [
            "unshare", "--user", f"--map-user={uid.pw_uid}", f"--map-group={uid.pw_gid}", "--keep-caps",
            "--net", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child",
            "bash", str(SETUP), str(self.root), CONTROLLER_ADDR,
            *(f"{n}={a}" for n, a in self.addrs.items()),
        ]
        log = open(self.root / "log" / "sandbox.log", "wb")  # noqa: SIM115 (lives as long as the sandbox)
        self.holder = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        wait_for("the sandbox namespaces", lambda: (self.root / "sandbox.ready").exists() or self._holder_died())
        if self._holder_died():
            raise SandboxError("sandbox set-up failed:\n" + (self.root / "log" / "sandbox.log").read_text())
        self.init_pid = wait_for("the sandbox's PID 1", lambda: _child_of(self.holder.pid if self.holder else 0))
        inner = dict(line.split() for line in (self.root / "nodes").read_text().splitlines())
        for name, pid in inner.items():
            self.node_pids[name] = wait_for(f"node {name}'s namespace", lambda p=int(pid): _outer_pid(self.init_pid, p))

    def _holder_died(self) -> bool:
        return self.holder is not None and self.holder.poll() is not None

    def _enter(self, target: int) -> list[str]:
        return ["nsenter", f"--target={target}", "--user", "--net", "--mount", "--uts", "--pid",
                "--preserve-credentials"]

    def run(self, args: Sequence[str], node: str | None = None, check: bool = True,
            timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """Run a command in the controller's namespaces (or a compute node's), as the sandbox user."""
        target = self.node_pids[node] if node else self.init_pid
        proc = subprocess.run([*self._enter(target), *args], capture_output=True, text=True, env=self.env,
                              timeout=timeout_s, cwd=self.root / "jobs", check=False)
        if check and proc.returncode != 0:
            raise SandboxError(f"{' '.join(args)}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
        return proc

    def spawn(self, args: Sequence[str], node: str | None, log_name: str) -> subprocess.Popen[bytes]:
        target = self.node_pids[node] if node else self.init_pid
        log = open(self.root / "log" / log_name, "ab")  # noqa: SIM115
        proc = subprocess.Popen([*self._enter(target), *args], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                env=self.env, cwd=self.root)
        self.daemons.append(proc)
        return proc

    # --- daemons

    def start_munge(self) -> None:
        r = self.root
        self.spawn(["munged", "--foreground", f"--key-file={r / 'munge.key'}", f"--pid-file={r / 'run/munged.pid'}",
                    f"--log-file={r / 'log/munged.log'}", f"--seed-file={r / 'run/munged.seed'}"], None, "munged.out")
        wait_for("munged's socket", lambda: (r / "munge" / "munge.socket.2").exists())

    def start_slurmctld(self) -> None:
        proc = self.spawn(["slurmctld", "-D", "-f", str(self.slurm_conf)], None, "slurmctld.out")

        def up() -> bool:
            if proc.poll() is not None:
                raise SandboxError(f"slurmctld exited with {proc.returncode}:\n{self.logs()}")
            return "UP" in self.run(["scontrol", "ping"], check=False).stdout

        wait_for("slurmctld to answer", up)

    def stop_slurmctld(self) -> None:
        self.run(["scontrol", "shutdown", "slurmctld"])
        wait_for("slurmctld to stop", lambda: "DOWN" in self.run(["scontrol", "ping"], check=False).stdout)

    def start_slurmd(self, node: str) -> None:
        """Start the node's slurmd and wait until the node has registered (one at a time: before a configless
        slurmd knows its name it caches the fetched files in a folder all of them share)."""
        proc = self.spawn(["slurmd", "-D", *slurmd_args(self.site, self.nodes[node])], node, f"slurmd-{node}.out")

        def registered() -> bool:
            if proc.poll() is not None:
                raise SandboxError(f"slurmd of {node} exited with {proc.returncode}:\n{self.logs()}")
            return bool(self.node_line(node))

        wait_for(f"{node} to register", registered)

    def stop_slurmd(self, node: str) -> None:
        pid_file = Path(self.site.slurmd_pid_file.replace("%n", node))
        pid = wait_for(f"{pid_file}", lambda: pid_file.exists() and pid_file.read_text().strip())
        self.run(["kill", "-TERM", pid], node=node)

    # --- queries

    def node_line(self, node: str) -> str:
        proc = self.run(["scontrol", "show", "node", node, "--oneliner"], check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def job(self, job_id: str) -> dict[str, str]:
        out = self.run(["scontrol", "show", "job", job_id, "--oneliner"]).stdout
        fields: dict[str, str] = {}
        for token in out.split():
            if "=" in token:
                k, _, v = token.partition("=")
                fields.setdefault(k, v)
        return fields

    def sbatch(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(["sbatch", "--parsable", f"--output={self.root / 'jobs'}/%j.out", *args], check=check)

    def stop(self) -> None:
        if self.init_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
        if self.holder is not None:
            try:
                self.holder.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait(timeout=30)
        for proc in self.daemons:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)

    def logs(self) -> str:
        out = []
        for path in sorted((self.root / "log").glob("*")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            out.append(f"== {path.name}\n" + "\n".join(lines))
        return "\n".join(out)


def sandbox_site(site: SlurmSite, root: Path) -> SlurmSite:
    """ndfleet's site with what a sandbox needs instead: paths in `root`, the sandbox user, no cgroup plugins
    (no cgroup hierarchy to delegate in a user namespace), no accounting database, fake GPU device files, a short
    health-check interval and slurmd timeout so the test waits seconds, not minutes."""
    return replace(
        site,
        controller_host="ctl",
        controller_addr=CONTROLLER_ADDR,
        slurm_user=SANDBOX_USER,
        slurmd_user=SANDBOX_USER,
        state_save_location=str(root / "state"),
        slurmd_spool_dir=str(root / "spool" / "%n"),
        slurmctld_pid_file=str(root / "run" / "slurmctld.pid"),
        slurmd_pid_file=str(root / "run" / "slurmd-%n.pid"),
        slurmctld_log_file=str(root / "log" / "slurmctld.log"),
        slurmd_log_file=str(root / "log" / "slurmd-%n.log"),
        proctrack_type="proctrack/pgid",
        task_plugin="task/none",
        accounting=False,
        gpu_device_files=str(root / "dev" / f"nvidia[0-{site.gpus_per_node - 1}]"),
        real_memory_mib=1000,
        health_check_program=str(root / "bin" / "ndfleet-slurm-health"),
        health_check_interval_s=3,
        slurmd_timeout_s=10,
    )


def installed_slurm_release() -> tuple[int, int]:
    """(year, month) of the slurmctld the sandbox runs: `slurmctld -V` prints "slurm-wlm 22.05.8" or "slurm 25.11.5"."""
    out = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True, timeout=30, check=True).stdout
    year, month = out.split()[-1].split(".")[:2]
    return int(year), int(month)


# What ndfleet's Slurm (25.11) does by default and an older Slurm does only when told, for the CLOUD nodes of an
# elastic island. The rendered slurm.conf has neither setting; the sandbox adds the one its Slurm needs, so that the
# tests see the behaviour a deployed controller has (docs/slurm.md, "Settings left to Slurm's defaults").
# (release that made it the default, SlurmctldParameters option, or slurm.conf line)
OLDER_RELEASE_EQUIVALENTS = (
    ((23, 2), "", "PrivateData=cloud"),  # powered-down CLOUD nodes listed by scontrol and sinfo (RELEASE_NOTES 23.02)
    ((23, 11), "cloud_reg_addrs", ""),  # a CLOUD node's address from its registration (RELEASE_NOTES 23.11)
)


def with_older_release_equivalents(conf: str, release: tuple[int, int]) -> str:
    """ndfleet's slurm.conf with the settings an older Slurm needs for 25.11's default behaviour (none for 23.11+)."""
    if "State=CLOUD" not in conf:
        return conf
    lines = conf.splitlines()
    for since, option, line in OLDER_RELEASE_EQUIVALENTS:
        if release >= since:
            continue
        if option:
            at = next(i for i, ln in enumerate(lines) if ln.startswith("SlurmctldParameters="))
            lines[at] += f",{option}"
        if line:
            lines.append(line)
    return "\n".join(lines) + "\n"


def _child_of(pid: int) -> int:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status:
                return int(entry)
    return 0


def _outer_pid(init_pid: int, inner_pid: int) -> int:
    """Our PID of the process that is `inner_pid` inside the sandbox's PID namespace."""
    try:
        pidns = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != pidns:
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("NSpid:") and int(line.split()[-1]) == inner_pid:
                return int(entry)
    return 0
