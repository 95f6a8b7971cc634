"""The node's monitoring set-up script, function by function, with fake tools on PATH: the physical host name from
a Hyper-V KVP pool file, the scale set's tags from the metadata service, and the Prometheus download checked
against the release's sha256sums.txt (a wrong sum installs nothing)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from ndfleet.monitoring import agent, exporters
from ndfleet.stackconfig.clusterspec import ClusterSpec

TIMEOUT_S = 60
KVP_KEY, KVP_VALUE = 512, 2048


def script(spec: ClusterSpec, tmp_path: Path) -> Path:
    path = tmp_path / "ndfleet-monitoring-setup"
    files = {f.name: f for f in agent.node_files(spec, spec.islands[0])}
    path.write_text(files["ndfleet-monitoring-setup"].content)
    return path


# Tools that change the machine: in these tests they must never run for real.
GUARDED = ("systemctl", "apt-get", "dpkg", "docker")


def call(path: Path, function: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Source the script (its main does not run when sourced) and call one function, with the tools that change
    the machine replaced by ones that fail loudly."""
    guard = path.parent / "guard-bin"
    for tool in GUARDED:
        fake_tool(guard, tool, f'echo "{tool} must not run in this test" >&2; exit 99\n')
    env = {**os.environ, **(env or {})}
    env["PATH"] = f"{guard}:{env['PATH']}"
    quoted = " ".join(f"'{a}'" for a in args)
    return subprocess.run(
        ["bash", "-c", f'source "$1"; {function} {quoted}', "test-shell", str(path)],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=env,
    )


def kvp_pool(records: list[tuple[str, str]]) -> bytes:
    return b"".join(k.encode().ljust(KVP_KEY, b"\0") + v.encode().ljust(KVP_VALUE, b"\0") for k, v in records)


def fake_tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
    (bin_dir / name).chmod(0o755)


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([("VirtualMachineName", "test-a-000001"), ("PhysicalHostName", "GVX22-0131-A12"), ("Other", "x")],
         "GVX22-0131-A12"),
        ([("VirtualMachineName", "test-a-000001")], "unknown"),
    ],
)
def test_physical_host_from_the_kvp_pool(
    mon_spec: ClusterSpec, tmp_path: Path, records: list[tuple[str, str]], expected: str
) -> None:
    pool = tmp_path / "kvp_pool_3"
    pool.write_bytes(kvp_pool(records))
    result = call(script(mon_spec, tmp_path), "physical_host", env={"NDFLEET_KVP_POOL": str(pool)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_physical_host_without_a_pool_is_unknown(mon_spec: ClusterSpec, tmp_path: Path) -> None:
    result = call(script(mon_spec, tmp_path), "physical_host", env={"NDFLEET_KVP_POOL": str(tmp_path / "none")})
    assert result.stdout.strip() == "unknown"


def test_imds_tag_reads_the_scale_set_tags(mon_spec: ClusterSpec, tmp_path: Path) -> None:
    tags = [{"name": agent.TAG_METRICS_DCR, "value": "dcr-0123"}, {"name": "ndfleet:island", "value": "a"}]
    bin_dir = tmp_path / "bin"
    # The metadata service's tagsList answer, whatever the URL (only the script's own URL is ever asked).
    fake_tool(bin_dir, "curl", f"echo '{json.dumps(tags)}'\n")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    path = script(mon_spec, tmp_path)
    assert call(path, "imds_tag", agent.TAG_METRICS_DCR, env=env).stdout.strip() == "dcr-0123"
    assert call(path, "imds_tag", agent.TAG_METRICS_ENDPOINT, env=env).stdout.strip() == ""


def _release(tmp_path: Path) -> tuple[Path, bytes]:
    """A stand-in Prometheus release tarball (the layout of the real one: one top folder)."""
    top = f"prometheus-{exporters.PROMETHEUS_VERSION}.linux-amd64"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in ("prometheus", "promtool"):
            data = b"#!/bin/sh\nexit 0\n"
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return tmp_path / f"{top}.tar.gz", buf.getvalue()


@pytest.mark.parametrize("good_sum", [True, False], ids=["checksum-matches", "checksum-differs"])
def test_prometheus_is_installed_only_when_its_checksum_matches(
    mon_spec: ClusterSpec, tmp_path: Path, good_sum: bool
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    tarball, data = _release(served)
    tarball.write_bytes(data)
    digest = hashlib.sha256(data if good_sum else b"something else").hexdigest()
    (served / "sha256sums.txt").write_text(f"{'0' * 64}  other.tar.gz\n{digest}  {tarball.name}\n")
    bin_dir = tmp_path / "bin"
    # curl -sfL --max-time N -o OUT URL: copy the served file named like the URL's last part.
    fake_tool(
        bin_dir,
        "curl",
        f'out=""; prev=""; for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done\n'
        f'cp "{served}/$(basename "${{@: -1}}")" "$out"\n',
    )
    prom_dir = tmp_path / "opt" / "prometheus"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "NDFLEET_PROM_DIR": str(prom_dir)}
    result = call(script(mon_spec, tmp_path), "install_prometheus", env=env)
    if good_sum:
        assert result.returncode == 0, result.stdout + result.stderr
        assert (prom_dir / "prometheus").stat().st_mode & 0o111 and (prom_dir / "promtool").exists()
    else:
        assert result.returncode == 1
        assert "checksum mismatch" in result.stdout
        assert not prom_dir.exists()


def test_the_script_asks_for_the_pinned_release(mon_spec: ClusterSpec, tmp_path: Path) -> None:
    text = script(mon_spec, tmp_path).read_text()
    assert exporters.PROMETHEUS_URL in text and exporters.PROMETHEUS_SHA256SUMS_URL in text


def test_sourcing_the_script_runs_nothing(mon_spec: ClusterSpec, tmp_path: Path) -> None:
    result = call(script(mon_spec, tmp_path), "true")
    assert result.returncode == 0 and result.stdout == "" and "must not run" not in result.stderr
