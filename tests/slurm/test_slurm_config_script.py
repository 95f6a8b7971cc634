"""ndfleet-slurm-config as the controller and a login node run it: it reads the Slurm configuration from the part of
the VM's userData after the controller's library bundle (ndfleet/slurm/userdata.py), which the boot step unpacked
once, and writes each file. Run with bash, jq, gzip and coreutils of this machine; curl and systemctl are stand-ins
(curl prints what IMDS would serve, the base64 text of userData with `format=text`, Microsoft Learn
`virtual-machines/user-data`; systemctl says slurmctld is not active, so no `scontrol reconfigure` is tried)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

from ndfleet.nodefiles import nodebundle
from ndfleet.slurm.machines import machine_bootstrap, machine_user_data
from ndfleet.slurm.userdata import compose, decompose
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack

TIMEOUT_S = 60


@pytest.mark.parametrize("role", ["controller", "login"])
def test_the_configuration_is_read_from_after_the_library_bundle(role: str, tmp_path: Path) -> None:
    spec = load_spec(load_stack("prod").ndfleet_config, "prod")
    boot = machine_bootstrap(spec, role)
    library, config = decompose(machine_user_data(spec, role))
    assert bool(library) == (role == "controller")
    # The same files, under tmp_path: the script writes each path the configuration names.
    files = {str(tmp_path / "root" / path.lstrip("/")): text for path, text in config["files"].items()}
    served = tmp_path / "user-data.b64"
    served.write_text(compose({**config, "files": files}, library))
    script = boot.files["ndfleet-slurm-config"]
    if role == "controller":  # the manifest customData wrote, where the test can put it
        manifest = tmp_path / "bundle.json"
        manifest.write_text(boot.files["bundle.json"])
        assert nodebundle.MANIFEST_PATH in script
        script = script.replace(nodebundle.MANIFEST_PATH, str(manifest))
        assert json.loads(manifest.read_text())["size"] == len(library)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "curl").write_text(f'#!/bin/sh\ncat {served}\n')
    (fake / "systemctl").write_text("#!/bin/sh\nexit 3\n")
    for tool in ("curl", "systemctl"):
        (fake / tool).chmod(0o755)
    (tmp_path / "ndfleet-slurm-config").write_text(script)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(tmp_path / "ndfleet-slurm-config")], env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for path, text in files.items():  # as `$(...)` and printf '%s\n' leave it: one final newline
        assert Path(path).read_text() == text.rstrip("\n") + "\n", path
    again = subprocess.run(["bash", str(tmp_path / "ndfleet-slurm-config")], env=env, capture_output=True, text=True,
                           timeout=TIMEOUT_S, check=False)  # fmt: skip
    assert again.returncode == 0 and "no change" in again.stdout, again.stderr
    assert base64.b64decode(served.read_text())[: len(library)] == library


@pytest.mark.parametrize("role", ["controller", "login"])
def test_the_set_up_reads_the_release_from_after_the_library_bundle(role: str, tmp_path: Path) -> None:
    """ndfleet-slurm-setup's first step, the Slurm release, read from the same userData with python3 (no jq yet):
    the twin found the controller's set-up still reading userData as the plain base64 JSON it was before the library
    moved in front of it (a UnicodeDecodeError, and no Slurm)."""
    spec = load_spec(load_stack("prod").ndfleet_config, "prod")
    boot = machine_bootstrap(spec, role)
    user_data = machine_user_data(spec, role)
    _, config = decompose(user_data)
    script = boot.files["ndfleet-slurm-setup"]
    start = script.index("version=$(")
    end = script.index("\n\n", start)  # the assignment, up to the blank line after it
    reader = script[start:end]
    if role == "controller":
        manifest = tmp_path / "bundle.json"
        manifest.write_text(boot.files["bundle.json"])
        assert nodebundle.MANIFEST_PATH in reader
        reader = reader.replace(nodebundle.MANIFEST_PATH, str(manifest))
    served = tmp_path / "user-data.b64"
    served.write_text(user_data)
    program = f'curl_() {{ cat {served}; }}\n{reader}\nprintf "%s\\n" "$version"\n'
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", program], capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == config["version"] == spec.slurm.version
