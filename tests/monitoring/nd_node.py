"""A fake ND H100 v5 / H200 v5 node for the real node_exporter: procfs, sysfs and a root with the node's mounts.

The hardware comes from the VM-size profile (vCPUs, InfiniBand HCAs, NVMe disks); what the image adds is written
out below, for the Ubuntu 22.04 HPC image as ndfleet sets it up (representative, not recorded from a node; each
line says where it comes from). node_exporter then decides, with its own default filters, which of them become
series: that is what the series budget measures (tests/monitoring/test_series_budget.py).
"""

from __future__ import annotations

from pathlib import Path

from ndfleet.nodefiles.nodeconfig import BLOB_MOUNT_ROOT, LUSTRE_MOUNT, NVME_MOUNT
from ndfleet.slurm.machines import NFS_MOUNTS
from ndfleet.stackconfig.clusterspec import ClusterSpec

# The accelerated-networking HCA Azure's udev rules name mlx5_an0; node_exporter's infiniband collector reads it too.
ETHERNET_HCA = "mlx5_an0"

# /proc/1/mounts: everything a node mounts, filtered or not. Azure Ubuntu 22.04 images: root on sda1, EFI on sda15
# (no separate /boot), the temporary disk on sdb1 at /mnt (cloud-init); ndfleet-setup's NVMe RAID0; systemd's tmpfs
# and pseudo file systems; Docker (dcgm-exporter's container) adds an overlay and a network namespace; one login
# session or Slurm job user adds /run/user/UID. node_exporter's defaults drop pseudo file systems by type and
# /dev, /proc, /sys, /run/credentials and /var/lib/docker mount points.
BASE_MOUNTS = (
    "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0",
    "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0",
    "udev /dev devtmpfs rw,nosuid,relatime,size=950000000k,mode=755 0 0",
    "devpts /dev/pts devpts rw,nosuid,noexec,relatime,gid=5,mode=620 0 0",
    "tmpfs /run tmpfs rw,nosuid,nodev,noexec,relatime,size=190000000k,mode=755 0 0",
    "/dev/sda1 / ext4 rw,relatime,discard 0 0",
    "securityfs /sys/kernel/security securityfs rw,nosuid,nodev,noexec,relatime 0 0",
    "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0",
    "tmpfs /run/lock tmpfs rw,nosuid,nodev,noexec,relatime,size=5120k 0 0",
    "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0",
    "pstore /sys/fs/pstore pstore rw,nosuid,nodev,noexec,relatime 0 0",
    "bpf /sys/fs/bpf bpf rw,nosuid,nodev,noexec,relatime,mode=700 0 0",
    "systemd-1 /proc/sys/fs/binfmt_misc autofs rw,relatime,fd=29,pgrp=1,timeout=0 0 0",
    "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0",
    "mqueue /dev/mqueue mqueue rw,nosuid,nodev,noexec,relatime 0 0",
    "debugfs /sys/kernel/debug debugfs rw,nosuid,nodev,noexec,relatime 0 0",
    "tracefs /sys/kernel/tracing tracefs rw,nosuid,nodev,noexec,relatime 0 0",
    "fusectl /sys/fs/fuse/connections fusectl rw,nosuid,nodev,noexec,relatime 0 0",
    "configfs /sys/kernel/config configfs rw,nosuid,nodev,noexec,relatime 0 0",
    "none /run/credentials/systemd-sysusers.service ramfs ro,nosuid,nodev,noexec,relatime,mode=700 0 0",
    "/dev/sda15 /boot/efi vfat rw,relatime,fmask=0077,dmask=0077 0 0",
    "/dev/sdb1 /mnt ext4 rw,relatime 0 0",
    f"/dev/md127 {NVME_MOUNT} xfs rw,noatime 0 0",
    "tmpfs /run/user/1000 tmpfs rw,nosuid,nodev,relatime,size=190000000k,mode=700,uid=1000,gid=1000 0 0",
    "overlay /var/lib/docker/overlay2/0123456789abcdef/merged overlay rw,relatime 0 0",
    "nsfs /run/docker/netns/0123456789ab nsfs rw 0 0",
)


# The port counters a ConnectX HCA shows under <sys>/class/infiniband/<hca>/ports/1/counters.
COUNTERS = (
    "port_rcv_data", "port_xmit_data", "link_downed", "symbol_error", "port_rcv_errors", "port_rcv_packets",
    "port_xmit_packets", "link_error_recovery", "port_xmit_wait", "port_rcv_remote_physical_errors",
    "port_rcv_discards", "port_xmit_discards", "local_link_integrity_errors", "excessive_buffer_overrun_errors",
    "port_rcv_constraint_errors", "port_xmit_constraint_errors", "port_rcv_switch_relay_errors",
    "unicast_rcv_packets", "unicast_xmit_packets", "multicast_rcv_packets", "multicast_xmit_packets",
)


def stack_mounts(spec: ClusterSpec) -> list[str]:
    """The stack's own mounts: one blobfuse2 (FUSE) mount per blob container, the Lustre file system, and with Slurm
    the Azure Files NFS shares (ndfleet/slurm/machines.py)."""
    lines = [f"blobfuse2 {BLOB_MOUNT_ROOT}/{c} fuse rw,nosuid,nodev,relatime,user_id=0,group_id=0,allow_other 0 0"
             for c in spec.storage.containers]  # fmt: skip
    if spec.storage.lustre is not None:
        lines.append(f"10.0.2.4@tcp:/lustrefs {LUSTRE_MOUNT} lustre rw,flock,lazystatfs 0 0")
    if spec.scheduler == "slurm":
        lines += [f"acct.file.core.windows.net:/acct/{m['share']} {m['path']} nfs4 rw,vers=4.1 0 0" for m in NFS_MOUNTS]
    return lines


# /proc/diskstats: the OS disk and its partitions, the temporary disk, the provisioning DVD Azure attaches (sr0),
# the NVMe disks and their RAID0, loop devices (snaps). node_exporter's default filter drops partitions and loops.
def diskstats(spec: ClusterSpec) -> str:
    devices = [(8, 0, "sda"), (8, 1, "sda1"), (8, 14, "sda14"), (8, 15, "sda15"), (8, 16, "sdb"), (8, 17, "sdb1"),
               (11, 0, "sr0"), (7, 0, "loop0"), (7, 1, "loop1"), (9, 127, "md127")]  # fmt: skip
    devices += [(259, n, f"nvme{n}n1") for n in range(spec.profile.nvme_count)]
    stats = " ".join(["7"] * 17)  # Linux 5.5+: 17 fields after the name
    return "".join(f"{major:4d} {minor:7d} {name} {stats}\n" for major, minor, name in devices)


# /proc/net/dev: loopback, the synthetic eth0 and its accelerated-networking VF (enP...), Docker's bridge and the
# dcgm-exporter container's veth, and IPoIB ib0.. for every InfiniBand HCA.
def net_dev(spec: ClusterSpec) -> str:
    interfaces = ["lo", "eth0", "enP30832s1", "docker0", "veth1a2b3c4"]
    interfaces += [f"ib{n}" for n in range(len(spec.profile.ib_devices))]
    head = ("Inter-|   Receive                                                |  Transmit\n"
            " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
            "carrier compressed\n")  # fmt: skip
    return head + "".join(f"{name:>6}: " + " ".join(["1000"] * 16) + "\n" for name in interfaces)


def proc_stat(vcpus: int) -> str:
    times = " ".join(["100"] * 10)
    lines = [f"cpu  {times}", *(f"cpu{n} {times}" for n in range(vcpus))]
    lines += ["intr 0", "ctxt 0", "btime 1700000000", "processes 1", "procs_running 1", "procs_blocked 0"]
    return "\n".join(lines) + "\n"


def build(root: Path, spec: ClusterSpec) -> tuple[Path, Path, Path]:
    """Writes the fake node under `root`; returns (procfs, sysfs, rootfs) for node_exporter's --path.* flags."""
    proc, sys, rootfs = root / "proc", root / "sys", root / "rootfs"
    (proc / "1").mkdir(parents=True)
    (proc / "net").mkdir()
    (proc / "stat").write_text(proc_stat(spec.profile.vcpus))
    for name in ("meminfo", "loadavg"):
        (proc / name).symlink_to(f"/proc/{name}")
    (proc / "diskstats").write_text(diskstats(spec))
    (proc / "net" / "dev").write_text(net_dev(spec))
    mounts = [*BASE_MOUNTS, *stack_mounts(spec)]
    (proc / "1" / "mounts").write_text("\n".join(mounts) + "\n")
    for line in mounts:  # node_exporter statfs()s <rootfs>/<mount point>
        (rootfs / line.split()[1].lstrip("/")).mkdir(parents=True, exist_ok=True)
    for device in (*spec.profile.ib_devices, ETHERNET_HCA):
        link_layer, rate = ("Ethernet", "200 Gb/sec (4X HDR)") if device == ETHERNET_HCA else (
            "InfiniBand", "400 Gb/sec (4X NDR)")  # fmt: skip
        write_hca(sys, device, link_layer, rate)
    return proc, sys, rootfs


def write_hca(sys: Path, device: str, link_layer: str, rate: str) -> None:
    """One ConnectX HCA's port 1 under <sys>/class/infiniband, as node_exporter's infiniband collector reads it."""
    base = sys / "class" / "infiniband" / device
    port = base / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (base / "board_id").write_text("MT_0000000838\n")
    (base / "fw_ver").write_text("28.39.1002\n")
    (base / "hca_type").write_text("MT4129\n")
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    (port / "rate").write_text(rate + "\n")
    (port / "link_layer").write_text(link_layer + "\n")
    for counter in COUNTERS:
        (port / "counters" / counter).write_text("7\n")
