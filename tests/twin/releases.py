"""Stand-in for the one third-party download a node makes: the Prometheus release on GitHub (ndfleet's
monitoring set-up fetches `prometheus-<version>.linux-amd64.tar.gz` and checks it against the release's
`sha256sums.txt`). The twin serves a tarball of the same layout holding this machine's Prometheus and promtool
(Debian's package, which CI installs for the monitoring tests), at the URL the plan's bootstrap names."""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
import urllib.parse
from pathlib import Path

from ndfleet.monitoring.exporters import PROMETHEUS_SHA256SUMS_URL, PROMETHEUS_URL, PROMETHEUS_VERSION

GITHUB_HOST = urllib.parse.urlsplit(PROMETHEUS_URL).hostname or "github.com"


def build(folder: Path) -> Path:
    """The release files under `folder`, laid out by URL path; returns `folder` (served for GITHUB_HOST)."""
    top = f"prometheus-{PROMETHEUS_VERSION}.linux-amd64"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for tool in ("prometheus", "promtool"):
            found = shutil.which(tool)
            if found is None:
                raise FileNotFoundError(f"the twin's release stand-in needs {tool} (apt-get install prometheus)")
            tar.add(found, arcname=f"{top}/{tool}")
    data = buf.getvalue()
    tarball = folder / urllib.parse.urlsplit(PROMETHEUS_URL).path.lstrip("/")
    sums = folder / urllib.parse.urlsplit(PROMETHEUS_SHA256SUMS_URL).path.lstrip("/")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    tarball.write_bytes(data)
    sums.write_text(f"{hashlib.sha256(data).hexdigest()}  {tarball.name}\n")
    return folder
