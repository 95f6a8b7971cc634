"""The twin: every machine of a plan booted under systemd in containers on a private bridge, with the stand-ins
around them. Runs as root inside network, mount and PID namespaces of its own (`unshare --net --mount --pid --fork
--mount-proc`), so the bridge,
the stand-ins' addresses, the overlay mounts and every process are gone when it ends, whatever happened.

    twin = Twin(plan_json, workdir, root=..., hpc=..., pool=...)
    twin.start()            # stand-ins, then every machine boots from its plan boot data
    twin.machine("dev-ib00-000000").wait_for(...)
    twin.close()
"""

from __future__ import annotations

import os
import queue
import secrets
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ndfleet.stackconfig.profiles import IMPACT_REPORTER_ROLE_ID, PROFILES
from tests.fakes.node import build_sysroot
from tests.twin import aptrepo, mysql, pki, releases
from tests.twin.arm import ARM_HOST, SUBSCRIPTION, Instance, ResourceManager, ScaleSet, computer_name
from tests.twin.machine import TwinMachine
from tests.twin.plan import AZURE_RESERVED_LOW, VMSS, Machine, PlanMachines, ScaleSetTemplate, load
from tests.twin.repairs import AutomaticRepairs, ImpactApi, kvp_pool
from tests.twin.standins import CloudState, ImdsHandler, ServicesHandler, serve
from tests.twin.status_arm import StatusReads, StatusScaleSet, StatusVm
from tests.twin.workspace import MetricsRelay, OperatorCredential, Target, Workspace

BRIDGE = "twinbr0"
BRIDGE_MAC = "02:00:00:74:77:6e"  # locally administered
ALLOCATION_S = 10  # from a new scale-set instance to its machine starting (tests/twin/arm.py)
IMDS_IP = "169.254.169.254"
ARCHIVE_HOST = "archive.twin.internal"
MS_HOST = "packages.microsoft.com"
FLEET_DIR_IN_MACHINE = "/opt/twin-fleet"
HW_ROOT = "/opt/twin-hw/root"
HARDWARE_LIB = "/opt/twin-hw/lib/hardware.so"
HERE = Path(__file__).resolve().parent
HW_BOOT_SCRIPT = (HERE / "fakes" / "hw-boot.sh").read_text()
UNHEALTHY_PREFIX = "Resource.Hpc.Unhealthy."  # the impact categories that take a host out of production
KVP_POOL_3 = "/var/lib/hyperv/.kvp_pool_3"  # where hv_kvp_daemon keeps what the host tells the guest
AZURE_MONITOR_WORKSPACE = "azure-native:monitor:AzureMonitorWorkspace"
# Azure gives a workspace's query endpoint a suffix of its own after the name (recorded answers, tests/data/status).
WORKSPACE_ENDPOINT_SUFFIX = "t1w2"


def in_private_namespaces() -> str | None:
    """Why the twin cannot run here (None when it can): it needs real root and a network namespace of its own."""
    if os.geteuid() != 0:
        return "the twin needs root"
    uid_map = Path("/proc/self/uid_map").read_text().split()
    if uid_map[:3] != ["0", "0", "4294967295"]:
        return "the twin needs real root, not a user namespace (run it under `unshare --net --mount --pid`, not `-r`)"
    # The init of its own PID namespace: when it ends, however it ends, the kernel ends every process of the
    # namespace, the containers' systemd included (systemd-nspawn killed outright leaves its container running).
    if os.getpid() != 1:
        return "the twin must be the first process of a PID namespace of its own (unshare --pid --fork --mount-proc)"
    # /proc/self/net/dev lists this network namespace's interfaces (/sys/class/net may be the host's mount).
    links = [ln.split(":")[0].strip() for ln in Path("/proc/self/net/dev").read_text().splitlines()[2:]]
    if set(links) - {"lo"} - {BRIDGE} - {n for n in links if n.startswith("vb-")}:
        return f"the twin must run in a network namespace of its own (found interfaces {sorted(links)})"
    tools = ("systemd-nspawn", "nsenter", "ip", "gpg", "dpkg-deb", "mount", "losetup", "cc", "mariadbd", "prometheus")
    for tool in tools:
        if shutil.which(tool) is None:
            return f"the twin needs {tool}"
    return None


def hwloc_shape(vm_size: str) -> str:
    """The processors of a VM of this size, as hwloc (which slurmd reads them through) would find them on the VM.

    `HWLOC_SYNTHETIC` makes hwloc build the topology from a description "as if hwloc_topology_set_synthetic() had
    been called" (hwloc(7), ENVIRONMENT VARIABLES); slurmd's xcpuinfo_hwloc_topo_get (SchedMD src/slurmd/common/
    xcpuinfo.c) counts sockets, cores and threads from it, so `slurmd -C` reports the size's shape from the profile
    (ND96isr H100 v5: 2 x 48 x 1), not the container host's 2 cores. The hardware library (fakes/hardware.c) sets it
    in every process of the machine and folds the VM's CPU numbers onto the host's where the kernel checks them."""
    p = PROFILES[vm_size]
    return f"HWLOC_SYNTHETIC=package:{p.sockets} core:{p.cores_per_socket} pu:{p.threads_per_core}"


class Twin:
    def __init__(
        self,
        plan_json: Path,
        workdir: Path,
        root: Path,
        hpc: Path,
        pool: Path,
        faults: dict[str, str] | None = None,
        nodes_per_island: dict[str, int] | None = None,
        never_boots: set[str] | None = None,
        bad_hosts: list[str] | None = None,
        stack_file: Path | None = None,
    ):
        self.plan: PlanMachines = load(plan_json, nodes_per_island)
        # The stack the plan came from: `ndfleet status` reads it, and the workspace runs its rendered agent rules.
        self.stack_file = stack_file
        self.spec = None
        if stack_file is not None:
            from ndfleet.stackload import load_stack_spec

            self.spec = load_stack_spec(None, str(stack_file), None)[0]
        self.workspace_account = next(
            ((r["name"], r["inputs"].get("resourceGroupName", "")) for r in self.plan.doc.get("resources", ())
             if r["type"] == AZURE_MONITOR_WORKSPACE), None,
        )  # fmt: skip
        self.workspace_host = (
            f"{self.workspace_account[0]}-{WORKSPACE_ENDPOINT_SUFFIX}.eastus.prometheus.monitor.azure.com"
            if self.workspace_account and self.spec is not None and self.spec.monitoring.enabled else None
        )  # fmt: skip
        self.workspace: Workspace | None = None
        self.workspace_error = ""  # why the workspace stand-in did not start
        self.relay: MetricsRelay | None = None
        # None: the stack's own scrape interval (ndfleet:monitoring.scrapeIntervalSeconds), as on Azure.
        self.workspace_scrape_interval_s: float | None = None
        self.workdir = workdir
        self.root = root  # the plain image (controller, login)
        self.hpc = hpc  # the HPC image's layer over it (compute nodes): tests/twin/image.py
        self.pool = pool
        self.faults = faults or {}  # machine name -> NDFLEET_FAKE_FAULTS
        self.state = CloudState(vault_name=self.plan.vault_name)
        self.machines: dict[str, TwinMachine] = {}
        self.servers: list = []
        self.gateway = str(next(self.plan.compute_subnet.hosts()))
        self.standin_ip = str(list(self.plan.storage_subnet.hosts())[3])
        self.fleet_dir = workdir / "fleet"
        self.database: mysql.Database | None = None
        self.loops: list[str] = []
        self.timings: dict[str, list[float]] = {}  # what the tests measured, printed at the end of the run
        self.never_boots = never_boots or set()  # elastic scale sets whose new instances never boot
        # Hosts behind a bad cable or HCA from the start (the multi-node all_reduce_perf stand-in reads the list): a
        # fault a node has when it boots, not one that appears later (Slurm 24.11 registers a node awaiting burn-in
        # at once, and the controller's timer may burn it in before any test runs).
        self.bad_hosts = list(bad_hosts or [])
        self.arm: ResourceManager | None = None
        self.removed: list[str] = []  # machines the Resource Manager stand-in deleted and the twin removed
        self.reimaged: list[str] = []  # machines a reimage powered off and booted afresh (same name)
        self.azure_errors: list[str] = []
        # The physical host each machine runs on (Hyper-V's KVP PhysicalHostName): a new VM lands on a host of its
        # own. A repair's replacement lands on a new host when its predecessor's host was reported (every
        # `Resource.Hpc.Unhealthy.*` category takes the host out of production: Microsoft Learn, "Guest Health
        # Reporting impact categories"), and otherwise on the same one: nothing took that host out of the pool, and
        # the twin takes the worst case the allocator allows (`replace_instance`), the case the host ledger is for.
        self.hosts: dict[str, str] = {}
        self.impact: ImpactApi | None = None
        self.repairs = AutomaticRepairs(
            machines=lambda: self.role("compute"), probe=self._probe, replace=self.replace_instance
        )
        # What Azure does to machines (boot, delete) is done by one thread that lives as long as the twin: a machine
        # dies with the thread that started it (PR_SET_PDEATHSIG), so never from a request's short-lived thread.
        self._azure: queue.Queue = queue.Queue()
        threading.Thread(target=self._azure_worker, name="twin-azure", daemon=True).start()

    # --- set-up ----------------------------------------------------------------------------------------------
    def _network(self) -> None:
        prefix = self.plan.compute_subnet.prefixlen
        for cmd in (
            "ip link set lo up",
            f"ip link add {BRIDGE} type bridge",
            # A fixed address: a bridge otherwise takes the lowest of its ports' addresses, so a machine booted later
            # (an elastic island's) could change it, and every machine's ARP entry for the stand-ins would go stale
            # (the stand-ins unreachable for tens of seconds; seen as time-outs of the metadata service).
            f"ip link set {BRIDGE} address {BRIDGE_MAC}",
            f"ip addr add {self.gateway}/{prefix} dev {BRIDGE}",
            f"ip addr add {IMDS_IP}/32 dev {BRIDGE}",
            f"ip addr add {self.standin_ip}/32 dev {BRIDGE}",
            f"ip link set {BRIDGE} up",
        ):
            subprocess.run(cmd.split(), check=True)

    def _service_hosts(self) -> list[str]:
        hosts = [MS_HOST, ARCHIVE_HOST, releases.GITHUB_HOST]
        tags = {k: v for m in self.plan.machines for k, v in m.tags.items()}
        if self.plan.vault_name:
            hosts.append(f"{self.plan.vault_name}.vault.azure.net")
        hosts.append(ARM_HOST)  # the elastic scaler's, the Impact API's and `ndfleet status`'s
        if self.workspace_host:
            hosts.append(self.workspace_host)
        if tags.get("ndfleet:slurm-nfs"):
            hosts.append(f"{tags['ndfleet:slurm-nfs']}.file.core.windows.net")
        if tags.get("ndfleet:slurm-db-host"):
            hosts.append(tags["ndfleet:slurm-db-host"])
        if tags.get("ndfleet:storage-account"):
            hosts.append(f"{tags['ndfleet:storage-account']}.blob.core.windows.net")
        endpoint = tags.get("ndfleet:metrics-endpoint", "")
        if endpoint:
            hosts.append(endpoint.split("://", 1)[-1].split("/", 1)[0])
        return hosts

    def _build_hardware_lib(self) -> None:
        out = self.workdir / "hardware.so"
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(HERE / "fakes" / "hardware.c"), "-ldl"],
            check=True, capture_output=True,
        )  # fmt: skip
        self.hardware_lib = out.read_bytes()

    def _standins(self) -> None:
        version = str(self.plan.outputs.get("slurm", {}).get("slurmVersion") or "0")
        repos = self.workdir / "repos"
        keys = aptrepo.build(self.pool, repos, version)
        self.archive_key = keys["archive"]
        self.microsoft_key = keys["microsoft"]
        self.state.repo_dirs = {
            MS_HOST: repos / "microsoft",
            ARCHIVE_HOST: repos / "archive",
            releases.GITHUB_HOST: releases.build(self.workdir / "releases"),
        }
        self.state.machines_by_ip = {m.ip: m for m in self.plan.machines}
        # The munge key and database password are generated at deployment (pulumi_random: unknown to the plan); the
        # compute bundle's parts are the plan's own secrets, written as the deployment writes them.
        self.state.secrets = {"munge-key": secrets.token_hex(64), "slurmdbd-password": secrets.token_urlsafe(30),
                              **self.plan.vault_secrets}  # fmt: skip
        ca, cert, key = pki.make_ca_and_server(self.workdir / "pki", self._service_hosts(), [self.standin_ip])
        self.ca_pem = ca.read_bytes()
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        if self.plan.scale_sets or self.plan.fixed_scale_sets:
            controller = next(m for m in self.plan.machines if m.role == "controller")
            fixed = {name: ScaleSet(t, fixed=True) for name, t in self.plan.fixed_scale_sets.items()}
            for m in self.plan.machines:
                if m.extra.get("scale_set") in fixed:
                    fixed[m.extra["scale_set"]].add(Instance(str(m.extra["instance_id"]), m.name, "Succeeded"))
            self.arm = ResourceManager(
                scale_sets={**{name: ScaleSet(t) for name, t in self.plan.scale_sets.items()}, **fixed},
                grants=self.plan.grants,
                allowed_client_ids={controller.identity_client_id},
                tokens=self.state.tokens.get,
                boot=self.boot_instance,
                remove=self.remove_instance,
                reimage=self.reimage_instance,
                never_boots=self.never_boots,
            )
            self.state.arm = self.arm
        computes = {m.identity_client_id for m in self.plan.machines if m.role == "compute"}
        self.impact = ImpactApi(
            tokens=self.state.tokens.get,
            reporter_client_ids=computes if IMPACT_REPORTER_ROLE_ID in self.plan.assigned_roles else set(),
        )
        self.state.impact = self.impact
        self.state.status_reads = StatusReads(
            SUBSCRIPTION, self.status_scale_sets, self.state.tokens.get,
            (self.workspace_account[1], self.workspace_account[0], f"https://{self.workspace_host}")
            if self.workspace_account and self.workspace_host else None,
        )  # fmt: skip
        self.servers = [
            serve(ImdsHandler, self.state, IMDS_IP, 80),
            serve(ServicesHandler, self.state, self.standin_ip, 80),
            serve(ServicesHandler, self.state, self.standin_ip, 443, tls),
        ]
        if self.workspace_host:
            try:
                self._workspace(tls)
            except Exception as exc:  # noqa: BLE001 - only `ndfleet status`'s tests need it: they say why it is missing
                self.workspace, self.workspace_error = None, repr(exc)
        db_host = next(
            (m.tags.get("ndfleet:slurm-db-host") for m in self.plan.machines if m.role == "controller"), None
        )
        if db_host:
            self.database = mysql.Database(self.workdir / "mysql", self.standin_ip, cert, key)
            self.database.start(user="slurmdbd", password=self.state.secrets["slurmdbd-password"])

    # --- `ndfleet status` against the twin (tests/twin/status_arm.py, tests/twin/workspace.py) ------------------
    def _workspace(self, tls: ssl.SSLContext) -> None:
        """The monitoring workspace: a real Prometheus fed by one agent running the stack's rendered agent rules
        for each island's nodes and the controller, through a relay to each machine's loopback node_exporter."""
        from ndfleet.monitoring import agent

        assert self.spec is not None
        configs = {i.name: next(f.content for f in agent.node_files(self.spec, i) if f.name == "prometheus.yml.in")
                   for i in self.spec.islands}  # fmt: skip
        configs["controller"] = agent.controller_config(self.spec, "")[agent.PROMETHEUS_CONFIG_TEMPLATE]
        self.relay = MetricsRelay(self._node_exporter, lambda: [t.node for t in self._metric_targets("")])
        relay = self.relay.address
        self.workspace = Workspace(
            self.workdir / "workspace", configs, lambda: self._metric_targets(relay), self.state.tokens.get, tls,
            listen=(self.standin_ip, 0), binary=shutil.which("prometheus") or "prometheus",
            scrape_interval_s=self.workspace_scrape_interval_s,
        )  # fmt: skip
        self.workspace.start()

    def _metric_targets(self, relay: str) -> list[Target]:
        """Every machine whose agent sends metrics: the compute nodes (their island's rules) and the controller."""
        out = []
        for tm in list(self.machines.values()):
            role = tm.spec.role
            kind = "controller" if role == "controller" else tm.spec.island if role == "compute" else None
            if kind:
                out.append(Target(kind, relay, tm.name, self.hosts.get(tm.name, "unknown"), f"/metrics/{tm.name}"))
        return out

    def _node_exporter(self, name: str) -> bytes | None:
        """What node_exporter serves inside the machine (it listens on the machine's loopback only)."""
        from ndfleet.monitoring.exporters import NODE_EXPORTER_ADDRESS

        tm = self.machines.get(name)
        if tm is None or getattr(tm, "frozen", False):  # a hung node answers nothing (TwinMachine.freeze)
            return None
        cp = tm.run(f"curl -sf --max-time 10 http://{NODE_EXPORTER_ADDRESS}/metrics", check=False, timeout=30)
        return cp.stdout.encode() if cp.returncode == 0 else None

    def status_scale_sets(self) -> list[StatusScaleSet]:
        """The plan's scale sets as Resource Manager would show them now: a fixed island's instances are the machines
        running with the Application Health stand-in's state; an elastic island's are the Resource Manager
        stand-in's, with the Application Health stand-in's state of the machine booted for each."""
        out = []
        for r in self.plan.doc.get("resources", ()):
            if r["type"] != VMSS:
                continue
            inputs = r["inputs"]
            tags = dict(inputs.get("tags") or {})
            elastic = self.arm.scale_sets.get(inputs["vmScaleSetName"]) if (
                self.arm is not None and inputs.get("vmScaleSetName")) else None  # fmt: skip
            if elastic is not None:
                assert self.arm is not None
                with self.arm.lock:
                    listed = list(elastic.instances.values())
                vms = [StatusVm(i.instance_id, i.computer_name, self.repairs.state(i.computer_name),
                                i.provisioning_state, "running" if i.computer_name in self.machines else "starting")
                       for i in listed]  # fmt: skip
            else:
                vms = [StatusVm(str(tm.spec.extra.get("instance_id", "")), tm.name, self.repairs.state(tm.name))
                       for tm in self.role("compute") if tm.spec.extra.get("scale_set") == r["name"]]  # fmt: skip
            with self.repairs.lock:
                running = r["name"] in self.repairs.running
            out.append(StatusScaleSet(
                name=inputs.get("vmScaleSetName") or r["name"], resource_group=inputs.get("resourceGroupName", ""),
                island=tags.get("ndfleet:island", ""),
                computer_name_prefix=inputs["virtualMachineProfile"]["osProfile"]["computerNamePrefix"],
                vm_size=inputs["sku"]["name"], tags=tags,
                repairs_policy=dict(inputs.get("automaticRepairsPolicy") or {}), repairs_running=running,
                vms=tuple(vms), fixed=elastic is None,
                capacity=int(inputs["sku"]["capacity"]) if elastic is None else None,
            ))  # fmt: skip
        return out

    def operator(self) -> OperatorCredential:
        """A person's Entra identity for `ndfleet status`: tokens the stand-ins accept, for the audience asked."""

        def record(token: str, client: str, audience: str) -> None:
            with self.state.lock:
                self.state.tokens[token] = (client, audience)

        return OperatorCredential(record)

    def status(self, fmt: str = "json") -> tuple[int, str, str]:
        """`ndfleet status --stack-file <the twin's stack> --format FMT`, in process, against the stand-ins: Resource
        Manager and the workspace's host names go to their stand-ins (like curl --connect-to), over TLS that trusts
        the twin's certificate authority. (exit code, stdout, stderr)."""
        from ndfleet.commands import status as status_cmd

        return self._ndfleet(status_cmd, ["status", "--format", fmt], sleep=lambda s: None)

    def goodput(self, since: str, fmt: str = "json") -> tuple[int, str, str]:
        """`ndfleet goodput --stack-file <the twin's stack> --since SINCE --format FMT`, wired as `status` is."""
        from ndfleet.commands import goodput as goodput_cmd

        return self._ndfleet(goodput_cmd, ["goodput", "--since", since, "--format", fmt])

    def _ndfleet(self, command: Any, argv: list[str], **seams: Any) -> tuple[int, str, str]:
        import contextlib
        import io

        from ndfleet.azure.arm import RetrySettings
        from ndfleet.azure.http import BoundedTransport
        from ndfleet.cli import build_parser

        assert self.stack_file is not None, "the twin was made without its stack file"
        connect_to = {ARM_HOST: (self.standin_ip, 443)}
        if self.workspace is not None and self.workspace_host:
            connect_to[self.workspace_host] = self.workspace.endpoint_address
        transport = BoundedTransport(tls=ssl.create_default_context(cadata=self.ca_pem.decode()), connect_to=connect_to)
        args = build_parser().parse_args([argv[0], "--stack-file", str(self.stack_file), *argv[1:]])
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = command.run_cli(
                args, env={"AZURE_SUBSCRIPTION_ID": SUBSCRIPTION}, credential=self.operator(), transport=transport,
                retry=RetrySettings(total=2, backoff_factor=0.5, backoff_max=5), **seams,
            )  # fmt: skip
        return code, out.getvalue(), err.getvalue()

    def _machine_files(self, m) -> dict[str, tuple[bytes, int]]:
        prefix = self.plan.compute_subnet.prefixlen
        hosts = ["127.0.0.1 localhost", *(f"{x.ip} {x.name}" for x in self.plan.machines)]
        hosts += [f"{self.standin_ip} {h}" for h in self._service_hosts()]
        lower_bundle = (self.root / "etc/ssl/certs/ca-certificates.crt").read_bytes()
        files: dict[str, tuple[bytes, int]] = {
            # Azure's data source, as NoCloud: the decoded customData is the user-data cloud-init reads.
            "/var/lib/cloud/seed/nocloud/user-data": (m.custom_data, 0o600),
            "/var/lib/cloud/seed/nocloud/meta-data": (
                f"instance-id: twin-{m.name}\nlocal-hostname: {m.name}\n".encode(), 0o600),
            "/etc/systemd/network/10-twin.network": (
                f"[Match]\nName=host0\n\n[Network]\nAddress={m.ip}/{prefix}\nGateway={self.gateway}\n".encode(), 0o644),
            "/etc/hosts": ("\n".join(hosts).encode() + b"\n", 0o644),
            # Azure DNS answers at once for a name it does not know (an elastic island's Slurm node name): no
            # resolver here, and glibc's "temporary failure" makes slurmctld retry every lookup ten times, 1 s apart.
            "/etc/nsswitch.conf": (self._nsswitch(), 0o644),
            "/etc/apt/sources.list.d/twin-archive.sources": (
                f"Types: deb\nURIs: http://{ARCHIVE_HOST}/debian\nSuites: {aptrepo.SUITE}\nComponents: main\n"
                f"Signed-By: /etc/apt/keyrings/twin-archive.asc\n".encode(), 0o644),
            "/etc/apt/keyrings/twin-archive.asc": (self.archive_key, 0o644),
            "/etc/ssl/certs/ca-certificates.crt": (lower_bundle + self.ca_pem, 0o644),
            "/usr/local/share/ca-certificates/twin-ca.crt": (self.ca_pem, 0o644),
        }  # fmt: skip
        if m.role == "compute":
            faults = self.faults.get(m.name, "")
            files["/opt/twin-hw/env"] = (
                f"NDFLEET_SYSROOT={HW_ROOT}\nNDFLEET_FAKE_FAULTS={faults}\n{hwloc_shape(m.vm_size)}\n".encode(), 0o644)
            files[HARDWARE_LIB] = (self.hardware_lib, 0o755)
            host = self.hosts.setdefault(m.name, f"TWINHOST{len(self.hosts):04d}")
            files[KVP_POOL_3] = (kvp_pool({"PhysicalHostName": host, "PhysicalHostNameFullyQualified": host}), 0o644)
            files["/etc/ld.so.preload"] = (f"{HARDWARE_LIB}\n".encode(), 0o644)
            # The HPC image trusts Microsoft's key and has its product repository as a source (docs/images.md,
            # ndfleet/images/ubuntu-hpc-2204.json apt_sources); here the key is the twin's, made for this run.
            files["/etc/apt/trusted.gpg.d/microsoft-prod.asc"] = (self.microsoft_key, 0o644)
            files["/etc/apt/sources.list.d/microsoft-prod.list"] = (
                f"deb [arch=amd64] https://{MS_HOST}/ubuntu/22.04/prod jammy main\n".encode(), 0o644)
            # What the hardware and a VM's kernel give at every boot: a fresh fake /proc (blob mounts are gone after a
            # reboot), the GPU driver's device files (gres.conf names them), and the machine's own cgroup controllers
            # writable (a VM's systemd owns its cgroup tree; nspawn mounts the v1 controllers read-only).
            files["/opt/twin-hw/boot.sh"] = (HW_BOOT_SCRIPT.encode(), 0o755)
            files["/etc/systemd/system/twin-hw-boot.service"] = (
                b"[Unit]\nDescription=twin hardware stand-in: what the hardware gives at boot\n"
                b"DefaultDependencies=no\nAfter=local-fs.target\nBefore=sysinit.target\n\n[Service]\nType=oneshot\n"
                b"ExecStart=/opt/twin-hw/boot.sh\n\n[Install]\nWantedBy=sysinit.target\n",
                0o644,
            )
        return files

    def _image(self, m: Machine) -> list[Path]:
        """The overlay's lower layers: compute nodes boot the HPC image, the controller and login the plain one."""
        return [self.hpc, self.root] if m.role == "compute" else [self.root]

    def _nsswitch(self) -> bytes:
        lines = (self.root / "etc/nsswitch.conf").read_text().splitlines()
        return "".join(("hosts: files" if ln.startswith("hosts:") else ln) + "\n" for ln in lines).encode()

    def _hardware(self, tm: TwinMachine) -> None:
        if tm.spec.role != "compute":
            return
        sysroot = tm.upper / HW_ROOT.lstrip("/")
        build_sysroot(sysroot, ["/mnt/resource_nvme"], [f for f in self.faults.get(tm.name, "").split(",") if f])
        shutil.copy(sysroot / "proc" / "mounts", sysroot / "proc" / "mounts.boot")
        wants = tm.upper / "etc/systemd/system/sysinit.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        (wants / "twin-hw-boot.service").symlink_to("/etc/systemd/system/twin-hw-boot.service")

    def _data_disks(self, m) -> list[str]:
        """The controller's managed data disk at LUN 0, where Azure's udev rules name it: a loop device over a sparse
        file, bound into the machine (the kernel's loop devices are the host's; one per disk, detached at close)."""
        if m.role != "controller":
            return []
        detach_stale_loops()
        image = self.workdir / "disks" / f"{m.name}-lun0.img"
        image.parent.mkdir(parents=True, exist_ok=True)
        with image.open("wb") as f:
            f.truncate(1 << 30)
        loop = subprocess.run(["losetup", "--find", "--show", str(image)], check=True, capture_output=True, text=True)
        self.loops.append(loop.stdout.strip())
        return [f"{self.loops[-1]}:/dev/disk/azure/scsi1/lun0"]

    def start(self, roles: tuple[str, ...] = ("controller", "login", "compute")) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.fleet_dir.mkdir(exist_ok=True)
        self.set_bad_hosts(self.bad_hosts)
        self._network()
        self._build_hardware_lib()
        self._standins()
        for m in self.plan.machines:
            if m.role not in roles:
                continue
            binds = [f"{self.fleet_dir}:{FLEET_DIR_IN_MACHINE}"]
            tm = TwinMachine(m, self._image(m), self.workdir / "machines", BRIDGE, binds, self._data_disks(m))
            tm.prepare(self._machine_files(m))
            self._hardware(tm)
            self.machines[m.name] = tm
        for tm in self.machines.values():
            tm.start()
            if tm.spec.extra.get("scale_set"):
                self.repairs.created(tm.name, tm.spec.extra["scale_set"])
        self.repairs.start()

    # --- what Azure does to a broken node (tests/twin/repairs.py) -------------------------------------------
    def _probe(self, name: str, port: int, path: str) -> str | None:
        """The Application Health extension's probe, from inside the machine (it runs in the guest)."""
        tm = self.machines.get(name)
        if tm is None:
            return None
        try:
            cp = tm.run(f"curl -s --max-time 10 http://127.0.0.1:{port}{path}", check=False, timeout=30)
        except Exception:  # noqa: BLE001 - a machine that cannot be entered answers nothing
            return None
        return cp.stdout if cp.returncode == 0 else None

    def replace_instance(self, name: str) -> str:
        """Automatic repairs' Replace: the instance is deleted and a new one created from the scale set's model, with
        the next instance id (so a new computer name) and a new address; both happen on the Azure thread."""
        old = self.plan.get(name)
        prefix, scale_set = old.extra["computer_name_prefix"], old.extra["scale_set"]
        ids = [m.extra.get("instance_id", -1) for m in self.plan.machines if m.extra.get("scale_set") == scale_set]
        new_id = max(ids) + 1
        spec = Machine(
            name=computer_name(prefix, new_id), role=old.role, custom_data=old.custom_data, user_data=old.user_data,
            tags=old.tags, island=old.island, identity_client_id=old.identity_client_id, vm_size=old.vm_size,
            extra={**old.extra, "instance_id": new_id},
        )  # fmt: skip
        self.plan.machines.append(spec)
        host = self.hosts.get(name)
        if host is not None and not self.host_reported(host):
            self.hosts[spec.name] = host
        if self.arm is not None:
            self.arm.replaced(scale_set, name, Instance(str(new_id), spec.name, "Succeeded"))
        self._azure.put(lambda: self._remove_instance(name))
        self._azure.put(lambda: self._boot_machine(spec))
        return spec.name

    def host_reported(self, host: str) -> bool:
        """Whether an impact with an Unhealthy category was filed for this physical host (the Impact API stand-in)."""
        return self.impact is not None and any(
            str(i.get("impactCategory", "")).startswith(UNHEALTHY_PREFIX)
            and (i.get("additionalProperties") or {}).get("PhysicalHostName") == host
            for i in self.impact.filed()
        )

    def inject_fault(self, name: str, faults: list[str]) -> None:
        """The node's hardware breaks now: the fake tools (tests/fakes/bin, through the hardware library, which reads
        /opt/twin-hw/env in every new process) report these faults from the next call on."""
        env = self.machine(name).root / "opt/twin-hw/env"
        lines = [ln for ln in env.read_text().splitlines() if not ln.startswith("NDFLEET_FAKE_FAULTS=")]
        env.write_text("\n".join([*lines, f"NDFLEET_FAKE_FAULTS={','.join(faults)}"]) + "\n")

    def stop_answering(self, name: str) -> None:
        """The node hangs now (TwinMachine.freeze): no process of it runs again; a repair's Replace removes it."""
        self.machine(name).freeze()

    # --- elastic islands: what Azure does when the Resource Manager stand-in creates or deletes an instance ---
    def _free_ip(self) -> str:
        taken = {m.ip for m in self.plan.machines}
        hosts = list(self.plan.compute_subnet.hosts())[AZURE_RESERVED_LOW - 1 :]
        return next(str(a) for a in hosts if str(a) not in taken)

    def _azure_worker(self) -> None:
        while True:
            action = self._azure.get()
            if action is None:
                return
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - one failed boot or delete must not stop the others
                self.azure_errors.append(repr(exc))

    def boot_instance(self, template: ScaleSetTemplate, inst: Instance) -> None:
        # Azure allocates and starts a VM in tens of seconds at best; a machine here starts in one. slurmctld takes a
        # node it powered up as up only when its boot time (whole seconds) is after the power-up request, so the
        # machine starts a little later, as a VM would.
        due = time.monotonic() + ALLOCATION_S
        self._azure.put(lambda: (time.sleep(max(0.0, due - time.monotonic())), self._boot_instance(template, inst)))

    def remove_instance(self, name: str) -> None:
        self._azure.put(lambda: self._remove_instance(name))

    def _boot_instance(self, template: ScaleSetTemplate, inst: Instance) -> None:
        """A new scale-set VM: its own address, the scale set's boot data and tags, booted like every machine."""
        self._boot_machine(Machine(
            name=inst.computer_name, role="compute", custom_data=template.custom_data,
            user_data=template.user_data, tags=template.tags, island=template.island, ip=self._free_ip(),
            identity_client_id=template.tags.get("ndfleet:identity-client-id", ""), vm_size=template.vm_size,
            extra={
                "resource_group": template.resource_group,
                "vm_name": f"{template.name}_{inst.instance_id}",
                "resource_id": f"/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/"
                f"{template.resource_group}/providers/Microsoft.Compute/virtualMachineScaleSets/{template.name}"
                f"/virtualMachines/{inst.instance_id}",
                # The model's Application Health extension and repairs policy: the stand-in probes the new VM, as the
                # extension in every instance of the model reports to Azure (Microsoft Learn, "Using Application
                # Health extension with Virtual Machine Scale Sets"); the scale set's AutomaticRepairs service stays
                # Suspended (the twin's start), so nothing repairs it.
                "app_health": template.health.get("app_health") or {},
                "automatic_repairs": template.health.get("automatic_repairs") or {},
            },
        ))  # fmt: skip
        self.repairs.created(inst.computer_name, template.name)
        inst.provisioning_state = "Succeeded"

    def _boot_machine(self, m: Machine) -> None:
        """Boot a machine Azure created while the twin runs (a scale-out's or a repair's)."""
        m.ip = self._free_ip()
        if m not in self.plan.machines:
            self.plan.machines.append(m)
        self.state.machines_by_ip[m.ip] = m
        # Azure DNS resolves a new VM's host name in the virtual network at once.
        for tm in list(self.machines.values()):
            with (tm.root / "etc/hosts").open("a") as f:
                f.write(f"{m.ip} {m.name}\n")
        tm = TwinMachine(
            m, self._image(m), self.workdir / "machines", BRIDGE, [f"{self.fleet_dir}:{FLEET_DIR_IN_MACHINE}"]
        )
        tm.prepare(self._machine_files(m))
        self._hardware(tm)
        self.machines[m.name] = tm
        tm.start()

    # --- a rolling upgrade's reimage (tests/twin/arm.py): the same VM, a new OS disk, the model's boot data ------
    def reimage_instance(self, template: ScaleSetTemplate, inst: Instance, done: Callable[[str | None], None]) -> None:
        self._azure.put(lambda: self._reimage(template, inst, done))

    def _reimage(self, template: ScaleSetTemplate, inst: Instance, done: Callable[[str | None], None]) -> None:
        """Power off and remove the instance's machine, then boot a fresh one from the template under the same
        computer name, address, identity and physical host (a reimage keeps the VM and its NIC; only the OS disk is
        new, so nothing the old machine wrote survives)."""
        try:
            old = self.plan.get(inst.computer_name)
            self._power_off_and_remove(inst.computer_name)
            self.reimaged.append(inst.computer_name)
            spec = Machine(
                name=old.name, role=old.role, custom_data=template.custom_data, user_data=template.user_data,
                tags=dict(template.tags), island=old.island, ip=old.ip, identity_client_id=old.identity_client_id,
                vm_size=old.vm_size, extra={**old.extra, **{k: v for k, v in template.health.items()
                                                             if k in ("app_health", "automatic_repairs")}},
            )  # fmt: skip
            self.plan.machines[self.plan.machines.index(old)] = spec
            self.state.machines_by_ip[spec.ip] = spec
            tm = TwinMachine(
                spec, self._image(spec), self.workdir / "machines", BRIDGE, [f"{self.fleet_dir}:{FLEET_DIR_IN_MACHINE}"]
            )
            tm.prepare(self._machine_files(spec))
            self._hardware(tm)
            self.machines[spec.name] = tm
            tm.start()
            if spec.extra.get("scale_set"):
                self.repairs.created(spec.name, spec.extra["scale_set"])
        except Exception as exc:  # noqa: BLE001 - the operation reports it Failed
            done(repr(exc))
            return
        done(None)

    def _remove_instance(self, name: str) -> None:
        if self._power_off_and_remove(name):
            self.removed.append(name)

    def _power_off_and_remove(self, name: str) -> bool:
        self.repairs.deleted(name)
        tm = self.machines.pop(name, None)
        if tm is None:
            return False
        try:
            tm.poweroff(timeout=60)
        except Exception:  # noqa: BLE001 - a deleted VM is gone, however its power-off went
            tm.kill()
        tm.kill()
        tm.unmount()
        subprocess.run(["rm", "-rf", str(tm.dir)], check=False, capture_output=True)
        self.state.machines_by_ip.pop(tm.spec.ip, None)
        return True

    def record(self, what: str, seconds: float) -> None:
        self.timings.setdefault(what, []).append(seconds)

    def machine(self, name: str) -> TwinMachine:
        return self.machines[name]

    def role(self, role: str) -> list[TwinMachine]:
        return [tm for tm in list(self.machines.values()) if tm.spec.role == role]

    def set_bad_hosts(self, names: list[str]) -> None:
        (self.fleet_dir / "bad-hosts").write_text("".join(f"{n}\n" for n in names))

    # --- tear-down -------------------------------------------------------------------------------------------
    def close(self) -> None:
        self.repairs.stop.set()
        if self.workspace is not None:
            self.workspace.close()
        if self.relay is not None:
            self.relay.close()
        if self.arm is not None:
            self.arm.boot = lambda template, inst: None  # nothing boots during the tear-down
        for tm in list(self.machines.values()):
            try:
                tm.poweroff(timeout=60)
            except Exception:  # noqa: BLE001 - tear-down goes on whatever one machine did
                tm.kill()
        for tm in list(self.machines.values()):
            tm.kill()
            tm.unmount()
        for server in self.servers:
            server.shutdown()
            server.server_close()
        if self.database is not None:
            self.database.stop()
        # The machines' disks (overlay upper dirs hold whiteouts and root-only work dirs that pytest's temporary-
        # folder clean-up cannot remove later).
        subprocess.run(["rm", "-rf", str(self.workdir / "machines")], check=False, capture_output=True)
        for loop in self.loops:
            subprocess.run(["losetup", "--detach", loop], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", BRIDGE], check=False, capture_output=True)
        self._azure.put(None)


def detach_stale_loops() -> None:
    """Loop devices an earlier twin left behind (one killed before its tear-down): their backing file is a twin data
    disk. A device still in use is only marked to go when its last user closes it (losetup -d sets autoclear)."""
    listing = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                             capture_output=True, text=True, check=False).stdout  # fmt: skip
    for line in listing.splitlines():
        name, _, back = line.partition(" ")
        if "/twin" in back and back.strip().split(" ")[0].endswith("-lun0.img"):
            subprocess.run(["losetup", "--detach", name], check=False, capture_output=True)


def wait_all(machines: list[TwinMachine], what: str, predicate, timeout: float, units: tuple[str, ...] = ()) -> None:
    deadline = time.monotonic() + timeout
    for tm in machines:
        tm.wait_for(what, lambda tm=tm: predicate(tm), max(5.0, deadline - time.monotonic()), units)


__all__ = ["Twin", "in_private_namespaces", "wait_all"]
