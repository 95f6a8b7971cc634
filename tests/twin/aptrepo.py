"""The package repositories the twin serves, built from Debian's .deb files (tests/twin/build-root.sh's pool):

- the distribution archive the image's apt reads (`http://archive.twin.internal/debian`, suite trixie), signed
  with a key the image trusts, as Ubuntu's images trust Ubuntu's archive key;
- Microsoft's Slurm repository (`https://packages.microsoft.com/repos/slurm-ubuntu-trixie/`, suite `stable`),
  signed with a second key that only `https://packages.microsoft.com/keys/microsoft.asc` gives, so a machine that
  does not install that key first cannot use it (the bug the twin must show). Its packages are named and versioned
  like Microsoft's builds (`slurm-smd-slurmd` = `<version>`): Debian's Slurm 24.11 binaries repacked into SchedMD's
  packages (SMD_PACKAGES), declaring SchedMD's dependencies (no PMIx), with the release's own systemd units
  (`Type=notify`, `--systemd $SLURMD_OPTIONS`, etc/slurmd.service.in) and debhelper's maintainer scripts.

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

SUITE = "trixie"
# The daemons' units are the ones the binaries' release ships (Debian installs Slurm 24.11's etc/*.service.in as
# generated: slurmd and slurmctld `Type=notify` with `--systemd`, slurmdbd `Type=simple` with `-D -s`).
DAEMONS = ("slurmd", "slurmctld", "slurmdbd")
# Microsoft's packages are SchedMD's own Debian packaging (SchedMD/slurm debian/control, debian/rules at 01cec7f):
# name -> (the Debian packages whose files it holds, what it declares). `slurm-smd` holds every plugin, the MySQL one
# included, and depends on `${shlibs:Depends}, munge` only: no PMIx, although Slurm is built `--with-pmix` (its
# mpi/pmix plugin dlopen()s libpmix at run time, src/plugins/mpi/pmix/mpi_pmix.c). Debian's own
# slurm-wlm-basic-plugins adds `libpmix2t64`; the stand-in leaves it out, as SchedMD's does.
SMD_PACKAGES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "slurm-smd": (("slurm-wlm-basic-plugins", "slurm-wlm-mysql-plugin"), "munge",
                  "slurm-wlm, slurm-wlm-basic-plugins, slurm-wlm-mysql-plugin, slurm-wlm-plugins"),
    "slurm-smd-client": (("slurm-client",), "slurm-smd (= {v}), munge, bash-completion", "slurm-client"),
    "slurm-smd-slurmd": (("slurmd",), "slurm-smd (= {v}), munge", "slurmd"),
    "slurm-smd-slurmctld": (("slurmctld",), "slurm-smd (= {v}), munge", "slurmctld"),
    "slurm-smd-slurmdbd": (("slurmdbd",), "slurm-smd (= {v}), munge", "slurmdbd"),
}
# What debhelper's dh_installsystemd generates for SchedMD's daemon packages (debian/rules: override_dh_installsystemd,
# default options): reload systemd, enable the unit, start it (deb-systemd-invoke honours policy-rc.d).
_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
  deb-systemd-helper enable {unit} >/dev/null || true
  deb-systemd-invoke start {unit} >/dev/null || true
fi
"""
_PRERM = """#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
  deb-systemd-invoke stop {unit} >/dev/null || true
fi
"""


def _shlibs(deb: Path) -> list[str]:
    """The shared-library dependencies of a Debian package (what `${shlibs:Depends}` gives a build of the same
    binaries), without PMIx: SchedMD's Slurm dlopen()s it instead of linking it."""
    depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], check=True, capture_output=True,
                             text=True).stdout  # fmt: skip
    out = []
    for dep in (d.strip() for d in depends.split(",")):
        name = dep.split()[0] if dep else ""
        if name.startswith("lib") and not name.startswith("libpmix"):
            out.append(dep)
    return out


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


def _repack(debs: list[Path], name: str, version: str, depends: str, conflicts: str, work: Path) -> Path:
    """Debian's binaries under Microsoft's name, version and declared dependencies, with debhelper's maintainer
    scripts when it ships a daemon (Debian's own scripts, which use ucf and create users,
    are not SchedMD's)."""
    tree = work / name
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "DEBIAN").mkdir(parents=True)
    shlibs: list[str] = []
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
        shlibs += [d for d in _shlibs(deb) if d not in shlibs]
    # Debian installs the daemons as `<name>-wlm` behind update-alternatives (its postinst); SchedMD's packages
    # install them under their own names.
    for path in (tree / "usr" / "sbin").glob("*-wlm") if (tree / "usr" / "sbin").is_dir() else []:
        path.rename(path.with_name(path.name.removesuffix("-wlm")))
    declared = ", ".join([*shlibs, depends.format(v=version)])
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: ndfleet twin <twin@invalid>\n"
        f"Depends: {declared}\nConflicts: {conflicts}\n"
        f"Description: twin stand-in for Microsoft's {name} (SchedMD's packaging, Debian's binaries)\n"
    )
    daemon = name.removeprefix("slurm-smd-")
    if daemon in DAEMONS:
        for script, text in (("postinst", _POSTINST), ("prerm", _PRERM)):
            (tree / "DEBIAN" / script).write_text(text.format(unit=f"{daemon}.service"))
            (tree / "DEBIAN" / script).chmod(0o755)
    conffiles = [str(p.relative_to(tree)) for p in (tree / "etc").rglob("*") if p.is_file()]
    if conffiles:
        (tree / "DEBIAN" / "conffiles").write_text("".join(f"/{c}\n" for c in conffiles))
    out = work / f"{name}_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(tree), str(out)], check=True, capture_output=True)
    return out


def _blobfuse2(work: Path) -> Path:
    """Microsoft's blobfuse2 package (packages.microsoft.com/ubuntu/22.04/prod): `/usr/bin/blobfuse2`, depending on
    fuse3 as Azure/azure-storage-fuse's packaging does (its .deb declares `Depends: fuse3`). The command is the
    hardware stand-in's fake (tests/fakes/bin/blobfuse2), which the HPC image's layer carries: the package only
    puts it on PATH, so a node that never installs the package has no blobfuse2, as on Azure."""
    tree = work / "blobfuse2"
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "usr" / "bin" / "blobfuse2").symlink_to("/opt/twin-hw/fakes/bin/blobfuse2")
    (tree / "DEBIAN" / "control").write_text(
        "Package: blobfuse2\nVersion: 2.3.2\nArchitecture: amd64\nMaintainer: ndfleet twin <twin@invalid>\n"
        "Depends: fuse3\nDescription: twin stand-in for Microsoft's blobfuse2\n"
    )
    out = work / "blobfuse2_2.3.2_amd64.deb"
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
    # The stack names a release (YY.MM.P) or an exact package version; the repository publishes revision -1.
    version = slurm_version if "-" in slurm_version else f"{slurm_version}-1"
    smd = [
        _repack([by_name[d] for d in debians], name, version, depends, conflicts, work)
        for name, (debians, depends, conflicts) in SMD_PACKAGES.items()
    ]
    ms = out / "microsoft"
    write_repo(ms / "repos" / f"slurm-ubuntu-{SUITE}", "stable", smd, out / "gpg-microsoft", "packages.microsoft.com")
    # Microsoft's product repository, which the HPC image already has as an apt source (docs/images.md).
    write_repo(ms / "ubuntu" / "22.04" / "prod", "jammy", [_blobfuse2(work)], out / "gpg-microsoft",
               "packages.microsoft.com")  # fmt: skip
    (ms / "keys").mkdir(parents=True, exist_ok=True)
    (ms / "keys" / "microsoft.asc").write_bytes(keys["microsoft"])
    # gpg started an agent per home to sign; nothing of the twin may outlive it.
    for home in ("gpg-archive", "gpg-microsoft"):
        subprocess.run(["gpgconf", "--homedir", str(out / home), "--kill", "all"], check=False, capture_output=True)
    return keys
