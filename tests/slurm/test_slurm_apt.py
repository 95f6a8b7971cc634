"""The Slurm set-up's apt side, checked with apt itself (issue 25): which slurm-smd version a `slurm.version` resolves
to, what the set-up says when the channel lacks it, and what the apt preferences make apt choose.

A stand-in for Microsoft's repository serves two channels of `slurm-ubuntu-jammy` on loopback, to an apt that reaches
it as `http://packages.microsoft.com` through an HTTP proxy (so `Pin: origin "packages.microsoft.com"` applies, as on a
machine): `stable` (25.11.4-1, 25.11.5-1, 25.11.5-2) and `insiders` (25.11.5-2 as well, the pre-release 25.11.6-1, and
pmix, as the Azure HPC image uses it). apt runs with its own configuration in a temporary folder (APT_CONFIG); the
Packages indexes name no real files, so nothing is ever downloaded or installed (`apt-get install -s`).
"""

from __future__ import annotations

import email.utils
import hashlib
import http.server
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ndfleet.slurm.machines import APT_PREFERENCES_PATH, machine_bootstrap, slurm_apt_preferences, slurm_node_files
from tests.slurm.test_slurm_conf import spec_of
from tests.system_tools import require_tools
from tests.test_health_endpoint import loopback_up

HOST = "packages.microsoft.com"
REPO_URL = f"http://{HOST}/repos/slurm-ubuntu-jammy"
CHANNELS = {
    "stable": [("slurm-smd", "25.11.4-1"), ("slurm-smd", "25.11.5-1"), ("slurm-smd", "25.11.5-2")],
    "insiders": [("slurm-smd", "25.11.5-2"), ("slurm-smd", "25.11.6-1"), ("pmix", "5.0.8-1")],
}
# The Azure HPC image's own pins (Azure/azhpc-images components/slurm-repo/slurm-u.pin, written by install_pmix.sh
# to /etc/apt/preferences.d/slurm-repository-pin-990), verbatim.
IMAGE_PIN_FILE = "slurm-repository-pin-990"
IMAGE_PINS = """Package: slurm-smd*
Pin:  origin "packages.microsoft.com"
Pin-Priority: 990

Package: pmix
Pin: origin "packages.microsoft.com"
Pin-Priority: 990

Package: slurm*
Pin: origin *ubuntu.com*
Pin-Priority: -1

Package: pmix
Pin: origin *ubuntu.com*
Pin-Priority: -1
"""


def _write_channel(www: Path, channel: str, fields: str) -> None:
    """One channel's Release and Packages; `fields`: which of Suite/Codename its Release names the channel by."""
    stanzas = []
    for name, version in CHANNELS[channel]:
        body = f"{name} {version}".encode()
        stanzas.append(
            f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: t <t@invalid>\n"
            f"Filename: pool/{channel}/{name}_{version}_all.deb\nSize: {len(body)}\n"
            f"SHA256: {hashlib.sha256(body).hexdigest()}\nDescription: stand-in\n"
        )
    dist = www / HOST / "repos" / "slurm-ubuntu-jammy" / "dists" / channel
    binary = dist / "main" / "binary-amd64"
    binary.mkdir(parents=True)
    packages = "\n".join(stanzas).encode()
    (binary / "Packages").write_bytes(packages)
    names = "".join(f"{f}: {channel}\n" for f in ("Suite", "Codename") if f.lower() in fields)
    (dist / "Release").write_text(
        f"Origin: Microsoft\nLabel: Microsoft\n{names}Date: {email.utils.formatdate(usegmt=True)}\n"
        f"Architectures: amd64 arm64\nComponents: main\nSHA256:\n"
        f" {hashlib.sha256(packages).hexdigest()} {len(packages)} main/binary-amd64/Packages\n"
    )


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """An HTTP proxy on loopback that answers every http://<host>/<path> from www/<host>/<path>."""
    loopback_up()
    www = tmp_path_factory.mktemp("www")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            url = urlsplit(self.path)
            target = www / url.netloc / url.path.lstrip("/")
            data = target.read_bytes() if target.is_file() else None
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], www
    finally:
        server.shutdown()
        server.server_close()


class Apt:
    """apt with its own configuration, sources and preferences under `root`."""

    def __init__(self, root: Path, proxy_port: int) -> None:
        self.root = root
        self.prefs = root / "etc" / "preferences.d"
        for sub in ("etc/preferences.d", "etc/sources.list.d", "etc/apt.conf.d", "state/lists/partial",
                    "cache/archives/partial"):  # fmt: skip
            (root / sub).mkdir(parents=True)
        (root / "status").write_text("")
        # As on a compute node: the set-up's source, and the HPC image's (Azure/azhpc-images install_pmix.sh).
        (root / "etc" / "sources.list").write_text("")
        for name, channel in (("ndfleet-slurm.list", "stable"), ("slurm.list", "insiders")):
            (root / "etc" / "sources.list.d" / name).write_text(f"deb [trusted=yes] {REPO_URL}/ {channel} main\n")
        settings = {
            "Dir::State": root / "state", "Dir::State::status": root / "status", "Dir::Cache": root / "cache",
            "Dir::Etc": root / "etc", "Dir::Etc::sourcelist": root / "etc" / "sources.list",
            "Dir::Etc::sourceparts": root / "etc" / "sources.list.d", "Dir::Etc::preferences": root / "etc" / "none",
            "Dir::Etc::preferencesparts": self.prefs, "Dir::Etc::parts": root / "etc" / "apt.conf.d",
            "APT::Architecture": "amd64", "APT::Sandbox::User": "root", "Acquire::Languages": "none",
            "Acquire::http::Proxy": f"http://127.0.0.1:{proxy_port}/",
        }  # fmt: skip
        (root / "apt.conf").write_text("".join(f'{k} "{v}";\n' for k, v in settings.items()))
        self.env = {**os.environ, "APT_CONFIG": str(root / "apt.conf")}

    def __call__(self, *args: str) -> str:
        proc = subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=60, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def priorities(self, package: str) -> dict[str, int]:
        """`apt-cache policy`'s version table: version -> priority."""
        table = self("apt-cache", "policy", package).split("Version table:")[1]
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"^ (?:\*\*\*| {3}) (\S+) (-?\d+)$", table, re.M)}

    def candidate(self, package: str) -> str:
        return re.search(r"Candidate: (\S+)", self("apt-cache", "policy", package)).group(1)  # type: ignore[union-attr]


@pytest.fixture(scope="module", params=["suite and codename", "suite", "codename"])
def apt(request: pytest.FixtureRequest, proxy: tuple[int, Path], tmp_path_factory: pytest.TempPathFactory) -> Apt:
    """apt after `apt-get update`, with the channels' Release files naming them as the parameter says, ndfleet's
    preferences and the HPC image's pins in place."""
    require_tools("apt-get", "apt-cache")
    port, www = proxy
    for old in www.glob("*"):
        shutil.rmtree(old)
    for channel in CHANNELS:
        _write_channel(www, channel, request.param)
    apt = Apt(tmp_path_factory.mktemp("apt"), port)
    (apt.prefs / Path(APT_PREFERENCES_PATH).name).write_text(slurm_apt_preferences())
    (apt.prefs / IMAGE_PIN_FILE).write_text(IMAGE_PINS)
    apt("apt-get", "update")
    return apt


def test_a_slurm_version_only_insiders_offers_is_never_chosen(apt: Apt) -> None:
    priorities = apt.priorities("slurm-smd")
    assert priorities["25.11.6-1"] == -1
    # A version both channels offer is one version to apt, and it is stable's.
    assert {v: priorities[v] for v in ("25.11.4-1", "25.11.5-1", "25.11.5-2")} == dict.fromkeys(
        ("25.11.4-1", "25.11.5-1", "25.11.5-2"), 990
    )
    assert apt.candidate("slurm-smd") == "25.11.5-2"


def test_pmix_from_insiders_is_left_alone(apt: Apt) -> None:
    assert apt.priorities("pmix") == {"5.0.8-1": 990}  # the image's own pin
    assert apt.candidate("pmix") == "5.0.8-1"


def test_the_exact_version_the_setup_asks_for_is_fetched_from_stable(apt: Apt) -> None:
    # A version both channels offer is fetched from the source listed first (apt_preferences(5)): the set-up's
    # ndfleet-slurm.list sorts before the image's slurm.list.
    uris = apt("apt-get", "install", "-y", "--print-uris", "slurm-smd=25.11.5-2")
    assert f"'{REPO_URL}/pool/stable/slurm-smd_25.11.5-2_all.deb'" in uris, uris


def test_the_preferences_file_must_sort_before_the_images(apt: Apt) -> None:
    # apt takes the first matching record (apt_preferences(5)); after the image's file, its slurm-smd* record (990
    # for any packages.microsoft.com version) would let the insiders pre-release through.
    assert Path(APT_PREFERENCES_PATH).name < IMAGE_PIN_FILE
    ours = apt.prefs / Path(APT_PREFERENCES_PATH).name
    late = apt.prefs / "zz-ndfleet-slurm"
    ours.rename(late)
    try:
        assert apt.candidate("slurm-smd") == "25.11.6-1"
    finally:
        late.rename(ours)
    assert apt.candidate("slurm-smd") == "25.11.5-2"


# --- resolving slurm.version against what the channel offers: the set-up script's own functions, with real apt


def _resolver(text: str) -> str:
    """The set-up script's of_release, update_lists and resolve_release functions, as rendered, and its apt_."""
    out = [next(line + "\n" for line in text.splitlines() if line.startswith("apt_() {"))]
    for name in ("of_release", "update_lists", "resolve_release"):
        start = text.index(f"\n{name}() {{\n") + 1
        out.append(text[start : text.index("\n}\n", start) + 3])
    return "".join(out)


@pytest.fixture(scope="module")
def resolver() -> str:
    spec = spec_of(nodes=2)
    compute = {f.name: f.content for f in slurm_node_files(spec, spec.islands[0])}["ndfleet-slurm-setup"]
    controller = machine_bootstrap(spec, "controller").files["ndfleet-slurm-setup"]
    assert _resolver(compute) == _resolver(controller)  # one resolver for every role
    return _resolver(compute)


def _resolve(apt: Apt, resolver: str, version: str, suite: str = "stable") -> subprocess.CompletedProcess[str]:
    script = (
        'set -euo pipefail\nlog() { echo "ndfleet-slurm-setup: $*" >&2; }\n'
        f"version={version}\n{resolver}resolve_release {REPO_URL}/ {suite}\n"
    )
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=apt.env, timeout=60,
                          check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("version", "resolved"),
    [("25.11.5", "25.11.5-2"), ("25.11.5-1", "25.11.5-1"), ("25.11.4", "25.11.4-1"), ("25.11.5-2", "25.11.5-2")],
)
def test_a_release_resolves_to_the_newest_revision_the_channel_has(
    apt: Apt, resolver: str, version: str, resolved: str
) -> None:
    proc = _resolve(apt, resolver, version)
    assert (proc.returncode, proc.stdout.strip()) == (0, resolved), proc.stderr


@pytest.mark.parametrize("version", ["25.11.6", "25.11.6-1", "25.11.5-3", "25.11.50", "25.1"])
def test_a_release_the_channel_lacks_is_a_named_failure_listing_what_it_has(
    apt: Apt, resolver: str, version: str
) -> None:
    # 25.11.6-1 is in insiders only: the set-up never takes a version from another channel.
    proc = _resolve(apt, resolver, version)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        f"ndfleet-slurm-setup: slurm-smd {version} is not in {REPO_URL} stable; it has: 25.11.5-2 25.11.5-1 25.11.4-1\n"
    )


def test_a_channel_that_offers_nothing_says_so(apt: Apt, resolver: str) -> None:
    proc = _resolve(apt, resolver, "25.11.5", suite="nightly")
    assert proc.returncode == 1
    assert proc.stderr.endswith(f"slurm-smd 25.11.5 is not in {REPO_URL} nightly; it has: nothing\n")


# --- a source the set-up does not use fails: `apt-get update` exits 100 (apt-get(8)), the set-up goes on (issue 47)


def _apt_with_a_gone_source(proxy: tuple[int, Path], root: Path) -> Apt:
    """apt as on a compute node, plus a third-party source whose repository has gone (no Release file: 404)."""
    require_tools("apt-get", "apt-cache")
    port, www = proxy
    for old in www.glob("*"):
        shutil.rmtree(old)
    for channel in CHANNELS:
        _write_channel(www, channel, "suite and codename")
    apt = Apt(root, port)
    (apt.root / "etc" / "sources.list.d" / "gone.list").write_text(
        "deb [trusted=yes] http://repo.example.invalid/gone jammy main\n"
    )
    return apt


def _update_then_resolve(apt: Apt, resolver: str, slurm_list: Path) -> subprocess.CompletedProcess[str]:
    script = (
        'set -euo pipefail\nlog() { echo "ndfleet-slurm-setup: $*" >&2; }\nversion=25.11.5\n'
        f"{resolver}update_lists {slurm_list} || exit 1\nresolve_release {REPO_URL}/ stable\n"
    )
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=apt.env, timeout=120,
                          check=False)  # fmt: skip


def test_a_failing_source_slurm_does_not_use_does_not_stop_the_setup(
    proxy: tuple[int, Path], resolver: str, tmp_path: Path
) -> None:
    apt = _apt_with_a_gone_source(proxy, tmp_path)
    plain = subprocess.run(["apt-get", "-q", "update"], capture_output=True, text=True, env=apt.env, timeout=120,
                           check=False)  # fmt: skip
    assert plain.returncode == 100, plain.stdout + plain.stderr  # what stopped the old set-up under `set -e`
    proc = _update_then_resolve(apt, resolver, apt.root / "etc" / "sources.list.d" / "ndfleet-slurm.list")
    assert (proc.returncode, proc.stdout.splitlines()[-1]) == (0, "25.11.5-2"), proc.stderr  # after apt's progress
    assert "apt-get update: a source failed (named above); going on with the lists it fetched" in proc.stderr
    # The other lists are kept (List-Cleanup off): the image's insiders channel still offers pmix.
    assert apt.candidate("pmix") == "5.0.8-1"


def test_microsofts_channel_failing_stops_the_setup_with_its_name(
    proxy: tuple[int, Path], resolver: str, tmp_path: Path
) -> None:
    apt = _apt_with_a_gone_source(proxy, tmp_path)
    slurm_list = apt.root / "etc" / "sources.list.d" / "ndfleet-slurm.list"
    slurm_list.write_text("deb [trusted=yes] http://repo.example.invalid/gone jammy main\n")
    proc = _update_then_resolve(apt, resolver, slurm_list)
    assert proc.returncode == 1 and "25.11" not in proc.stdout
    assert proc.stderr.rstrip().endswith(
        f"ndfleet-slurm-setup: apt-get update of {slurm_list} failed: Microsoft's Slurm channel could not be read"
    )
