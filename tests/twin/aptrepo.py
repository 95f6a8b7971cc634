"""The package repositories the twin serves, built from Debian's .deb files (tests/twin/build-root.sh's pool):

- the distribution archive the image's apt reads (`http://archive.twin.internal/debian`, suite bookworm), signed
  with a key the image trusts, as Ubuntu's images trust Ubuntu's archive key;
- Microsoft's Slurm repository (`https://packages.microsoft.com/repos/slurm-ubuntu-bookworm/`, suite `stable`),
  signed with a second key that only `https://packages.microsoft.com/keys/microsoft.asc` gives, so a machine that
  does not install that key first cannot use it (the bug the twin must show). Its packages are named and versioned
  like Microsoft's builds (`slurm-smd-slurmd` = `<version>`): slurmd and slurmctld are Debian's binaries repacked
  with the systemd units SchedMD ships (`Type=notify`, `--systemd $SLURMD_OPTIONS`, etc/slurmd.service.in), the
  other names depend on Debian's packages.

Indexes follow Debian's repository format (wiki.debian.org/DebianRepository/Format): Packages with Filename, Size,
SHA256; Release with the index hashes; InRelease clear-signed with gpg.
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import shutil
import subprocess
from pathlib import Path

SUITE = "bookworm"
SCHEDMD_UNITS = {
    "slurmd": """[Unit]
Description=Slurm node daemon
After=munge.service network-online.target remote-fs.target sssd.service
Wants=network-online.target

[Service]
Type=notify
EnvironmentFile=-/etc/sysconfig/slurmd
EnvironmentFile=-/etc/default/slurmd
RuntimeDirectory=slurm
RuntimeDirectoryMode=0755
ExecStart=/usr/sbin/slurmd --systemd $SLURMD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
KillMode=process
LimitNOFILE=131072
LimitMEMLOCK=infinity
LimitSTACK=infinity
Delegate=yes
TasksMax=infinity

[Install]
WantedBy=multi-user.target
""",
    "slurmctld": """[Unit]
Description=Slurm controller daemon
After=network-online.target remote-fs.target munge.service sssd.service
Wants=network-online.target
ConditionPathExists=/etc/slurm/slurm.conf

[Service]
Type=notify
EnvironmentFile=-/etc/sysconfig/slurmctld
EnvironmentFile=-/etc/default/slurmctld
User=slurm
Group=slurm
RuntimeDirectory=slurmctld
RuntimeDirectoryMode=0755
ExecStart=/usr/sbin/slurmctld --systemd $SLURMCTLD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
LimitNOFILE=65536
TasksMax=infinity

[Install]
WantedBy=multi-user.target
""",
    "slurmdbd": """[Unit]
Description=Slurm DBD accounting daemon
After=network-online.target remote-fs.target munge.service mysql.service mysqld.service mariadb.service sssd.service
Wants=network-online.target
ConditionPathExists=/etc/slurm/slurmdbd.conf

[Service]
Type=notify
EnvironmentFile=-/etc/sysconfig/slurmdbd
EnvironmentFile=-/etc/default/slurmdbd
User=slurm
Group=slurm
RuntimeDirectory=slurmdbd
RuntimeDirectoryMode=0755
ExecStart=/usr/sbin/slurmdbd --systemd $SLURMDBD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
LimitNOFILE=65536
TasksMax=infinity

[Install]
WantedBy=multi-user.target
""",
}
# Debian's Slurm is 22.05, whose daemons have no `--systemd` (SchedMD added it later; slurm-smd's units pass it).
# The stand-in packages put this shim where Debian's binary was: with `--systemd` it runs the daemon in the
# foreground and tells systemd READY=1 once the daemon listens on its port, as `--systemd` does; without it, it runs
# the daemon exactly as asked (so `-D` under Type=notify never becomes ready: issue 16's bug 2 shows as it would).
NOTIFY_SHIM = """#!/usr/bin/python3
import os, signal, socket, subprocess, sys, time
REAL = os.path.realpath(__file__) + ".real"
PORT = {"slurmd": 6818, "slurmctld": 6817, "slurmdbd": 6819}[os.path.basename(os.path.realpath(__file__)).split("-")[0]]
# The daemons know who they are by their name (argv[0]): keep the one they were called by.
args = sys.argv[1:]
if "--systemd" not in args:
    os.execv(REAL, [sys.argv[0], *args])
args = ["-D", *[a for a in args if a != "--systemd"]]
child = subprocess.Popen([sys.argv[0], *args], executable=REAL)
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, lambda s, f: child.send_signal(s))
def listening():
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        if any(ln.split()[1].endswith(":%04X" % PORT) and ln.split()[3] == "0A" for ln in lines):
            return True
    return False
while child.poll() is None and not listening():
    time.sleep(0.2)
if child.poll() is None and os.environ.get("NOTIFY_SOCKET"):
    addr = os.environ["NOTIFY_SOCKET"]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.connect("\\0" + addr[1:] if addr.startswith("@") else addr)
    sock.send(b"READY=1\\nMAINPID=%d" % os.getpid())
sys.exit(child.wait())
"""
# Microsoft's package name -> Debian's package it stands for.
SMD_PACKAGES = {
    # Microsoft's build has PMIx support (`srun --mpi=pmix`); Debian's plugin dlopen()s the unversioned
    # libpmix.so, which only libpmix-dev has.
    "slurm-smd": "slurm-wlm-basic-plugins, libpmix2, libpmix-dev",
    "slurm-smd-client": "slurm-client",
    "slurm-smd-slurmd": "slurmd",
    "slurm-smd-slurmctld": "slurmctld",
    "slurm-smd-slurmdbd": "slurmdbd",
}


def _control(deb: Path) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout


def _sign(home: Path, release: Path) -> None:
    subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--yes", "--clearsign", "-o", str(release.parent / "InRelease"),
         str(release)],
        check=True, capture_output=True,
    )  # fmt: skip


def make_key(home: Path, uid: str) -> bytes:
    """A new signing key in its own gpg home; returns the ASCII-armoured public key."""
    home.mkdir(parents=True, mode=0o700, exist_ok=True)
    subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "7d"],
        check=True, capture_output=True,
    )  # fmt: skip
    return subprocess.run(
        ["gpg", "--homedir", str(home), "--armor", "--export", uid], check=True, capture_output=True
    ).stdout


def write_repo(root: Path, suite: str, debs: list[Path], key_home: Path, origin: str) -> None:
    """A one-component (main), one-architecture (amd64) repository at `root` holding `debs`."""
    pool = root / "pool"
    pool.mkdir(parents=True, exist_ok=True)
    stanzas = []
    for deb in sorted(debs):
        target = pool / deb.name
        if not target.exists():
            shutil.copy2(deb, target)
        data = target.read_bytes()
        stanzas.append(
            _control(target).rstrip("\n")
            + f"\nFilename: pool/{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    binary = root / "dists" / suite / "main" / "binary-amd64"
    binary.mkdir(parents=True, exist_ok=True)
    packages = "\n".join(stanzas).encode()
    (binary / "Packages").write_bytes(packages)
    (binary / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
    lines = []
    for name in ("Packages", "Packages.gz"):
        data = (binary / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} main/binary-amd64/{name}")
    release = root / "dists" / suite / "Release"
    release.write_text(
        f"Origin: {origin}\nLabel: {origin}\nSuite: {suite}\nCodename: {suite}\n"
        f"Date: {email.utils.formatdate(usegmt=True)}\nArchitectures: amd64\nComponents: main\nSHA256:\n"
        + "\n".join(lines)
        + "\n"
    )
    _sign(key_home, release)


def _repack(deb: Path, name: str, version: str, work: Path) -> Path:
    """Debian's package under Microsoft's name and version, with SchedMD's unit when it ships a daemon."""
    tree = work / name
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True)
    control = tree / "DEBIAN" / "control"
    fields = []
    original = ""
    for line in control.read_text().splitlines():
        if line.startswith("Package: "):
            original = line.split(": ", 1)[1]
            line = f"Package: {name}"
        elif line.startswith("Version: "):
            line = f"Version: {version}"
        fields.append(line)
    fields.append(f"Provides: {original}\nConflicts: {original}\nReplaces: {original}")
    control.write_text("\n".join(fields) + "\n")
    unit = SCHEDMD_UNITS.get(original)
    if unit:
        for path in tree.glob("**/systemd/system/*.service"):
            if path.name == f"{original}.service":
                path.write_text(unit)
        daemon = next(p for p in (tree / "usr" / "sbin").iterdir() if p.name in (original, f"{original}-wlm"))
        daemon.rename(daemon.with_name(daemon.name + ".real"))
        daemon.write_text(NOTIFY_SHIM)
        daemon.chmod(0o755)
    (tree / "DEBIAN" / "md5sums").unlink(missing_ok=True)
    out = work / f"{name}_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(tree), str(out)], check=True, capture_output=True)
    return out


def _metapackage(name: str, version: str, depends: str, work: Path) -> Path:
    tree = work / name
    (tree / "DEBIAN").mkdir(parents=True, exist_ok=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: ndfleet twin <twin@invalid>\n"
        f"Depends: {depends}\nDescription: twin stand-in for Microsoft's {name}\n"
    )
    out = work / f"{name}_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(tree), str(out)], check=True, capture_output=True)
    return out


def build(pool: Path, out: Path, slurm_version: str) -> dict[str, bytes]:
    """Both repositories under `out` (archive/, microsoft/); returns the public keys {"archive", "microsoft"}."""
    keys = {
        "archive": make_key(out / "gpg-archive", "twin archive <archive@twin.invalid>"),
        "microsoft": make_key(out / "gpg-microsoft", "twin microsoft <microsoft@twin.invalid>"),
    }
    debs = sorted(pool.glob("*.deb"))
    by_name = {_control(d).split("Package: ", 1)[1].split("\n", 1)[0]: d for d in debs}
    write_repo(out / "archive" / "debian", SUITE, debs, out / "gpg-archive", "Debian")
    work = out / "smd-build"
    work.mkdir(parents=True, exist_ok=True)
    smd = []
    for name, debian in SMD_PACKAGES.items():
        if debian in SCHEDMD_UNITS:
            smd.append(_repack(by_name[debian], name, slurm_version, work))
        else:
            smd.append(_metapackage(name, slurm_version, debian, work))
    ms = out / "microsoft"
    write_repo(ms / "repos" / f"slurm-ubuntu-{SUITE}", "stable", smd, out / "gpg-microsoft", "packages.microsoft.com")
    (ms / "keys").mkdir(parents=True, exist_ok=True)
    (ms / "keys" / "microsoft.asc").write_bytes(keys["microsoft"])
    # gpg started an agent per home to sign; nothing of the twin may outlive it.
    for home in ("gpg-archive", "gpg-microsoft"):
        subprocess.run(["gpgconf", "--homedir", str(out / home), "--kill", "all"], check=False, capture_output=True)
    return keys
