"""`ndfleet-node setup` on a fake node: fake mdadm, mkfs.xfs, mount, blobfuse2, systemctl, modprobe and a fake
sysroot. First boot, second run (nothing redone), reboot (assemble and mount only), reimage (empty NVMe: all
again), failing and flaky mounts (retried with backoff within the budget, then reported by the validator)."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ndfleet_node.config import parse
from ndfleet_node.setup.storage import blobfuse2_config

from ndfleet.nodefiles.bootstrap import render_output_files
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.fakes.node import (
    build_sysroot,
    calls,
    hermetic_path,
    reboot,
    reimage,
    run_setup,
    run_validator,
    write_bundle,
)
from tests.test_health_endpoint import loopback_up

TAGS = [
    {"name": "ndfleet:storage-account", "value": "ndfleetprodsa"},
    {"name": "ndfleet:lustre-mgs", "value": "10.50.2.4"},
    {"name": "team", "value": "ml-infra"},
]
MOUNT_RETRY_S = 3  # the stack default is 240; small here so that a mount that never works fails fast
PROD_MOUNTS = ["/mnt/resource_nvme", "/mnt/blob/datasets", "/mnt/blob/checkpoints", "/mnt/lustre"]
DOES_WORK = ("mdadm --create", "mkfs.xfs", "mount ", "blobfuse2 mount", "modprobe", "systemctl enable")


@pytest.fixture(scope="module")
def imds() -> Iterator[str]:
    """A stand-in for the instance metadata service's tagsList, on 127.0.0.1; insists on `Metadata: true`."""
    loopback_up()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            ok = self.headers.get("Metadata") == "true"
            body = json.dumps(TAGS if ok else {"error": "Bad request"}).encode()
            self.send_response(200 if ok else 400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metadata/instance/compute/tagsList"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, imds) -> Path:
    spec = load_spec(load_stack("prod").ndfleet_config, "prod")
    folder = write_bundle(tmp_path_factory.mktemp("bundle"), render_output_files(spec, spec.islands[0]))
    data = json.loads((folder / "node.json").read_text())
    data["imds"]["tags_url"] = imds
    data["timeouts"]["mount_retry"] = MOUNT_RETRY_S
    (folder / "node.json").write_text(json.dumps(data))
    return folder


class Node:
    """A fake node: its sysroot and its PATH; `cloud_init()` writes what cloud-init writes before set-up."""

    def __init__(self, base: Path, bundle: Path, faults: tuple[str, ...] = (), missing: tuple[str, ...] = ()):
        self.root = build_sysroot(base / "root", (), ("peermem_absent", *faults))
        self.bin = Path(hermetic_path(base / "bin", missing))
        self.bundle, self.faults = bundle, faults
        self.cloud_init()

    def cloud_init(self) -> None:
        etc = self.root / "etc" / "ndfleet"
        etc.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.bundle / "nccl.conf", etc / "nccl.conf")

    def setup(self):
        return run_setup(self.bundle, self.root, self.bin, self.faults)

    def validate(self, base: Path):
        return run_validator(self.bundle, base, "quick", self.faults, sysroot=self.root, bindir=self.bin)

    def mounts(self) -> list[str]:
        return [ln.split()[1] for ln in (self.root / "proc" / "mounts").read_text().splitlines()]


def steps(run) -> dict[str, dict[str, str]]:
    assert run.report is not None, run.stdout + run.stderr
    return {s["step"]: s for s in run.report["steps"]}


def work_done(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith(DOES_WORK)]


@pytest.fixture
def node(tmp_path, bundle) -> Node:
    return Node(tmp_path, bundle, ("fm_stopped",))


def test_first_boot_sets_up_everything(node, tmp_path):
    run = node.setup()
    assert run.rc == 0, run.stdout + run.stderr
    assert {name: s["status"] for name, s in steps(run).items()} == {
        n: "ok" for n in ("nvme", "nccl", "fabricmanager", "peermem", "dcgm", "blob", "lustre")
    }
    done = calls(node.root)
    assert any(c.startswith("mdadm --create /dev/md/ndfleet-nvme --level=0 --raid-devices=8") for c in done)
    assert "mkfs.xfs -q -f /dev/md/ndfleet-nvme" in done
    assert "mount -o noatime /dev/md/ndfleet-nvme /mnt/resource_nvme" in done
    assert "mount -t lustre -o noatime,flock 10.50.2.4@tcp:/lustrefs /mnt/lustre" in done
    assert "modprobe nvidia-peermem" in done
    assert "systemctl enable --now nvidia-fabricmanager.service" in done
    assert set(PROD_MOUNTS) <= set(node.mounts())
    assert (node.root / "etc" / "nccl.conf").read_text() == (node.bundle / "nccl.conf").read_text()
    assert (node.root / "etc" / "modules-load.d" / "ndfleet-peermem.conf").read_text() == "nvidia-peermem\n"
    assert stat.S_IMODE((node.root / "mnt" / "resource_nvme").stat().st_mode) == 0o1777


def test_blob_containers_use_the_managed_identity_and_private_config(node):
    node.setup()
    cfg = node.root / "etc" / "ndfleet" / "blobfuse2-datasets.yaml"
    text = cfg.read_text()
    assert "  mode: msi" in text and "account-name: ndfleetprodsa" in text
    assert "endpoint: https://ndfleetprodsa.blob.core.windows.net" in text
    assert "key" not in text.replace("-key", "")  # no account key, no SAS
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600


def test_the_node_then_validates_healthy(node, tmp_path):
    assert node.setup().rc == 0
    r = node.validate(tmp_path / "v")
    assert r.rc == 0, r.stdout + r.stderr
    assert r.report and [s["status"] for s in r.report["setup"]] == ["ok"] * 7


def test_a_second_run_redoes_nothing(node):
    node.setup()
    before = len(calls(node.root))
    run = node.setup()
    assert run.rc == 0
    assert work_done(calls(node.root)[before:]) == []
    assert "already mounted" in steps(run)["nvme"]["message"]
    assert steps(run)["nccl"]["message"] == "/etc/nccl.conf is up to date"


def test_a_reboot_assembles_and_mounts_without_recreating(node):
    node.setup()
    reboot(node.root)
    before = len(calls(node.root))
    run = node.setup()
    assert run.rc == 0, run.stdout + run.stderr
    after = calls(node.root)[before:]
    assert "mdadm --assemble --scan" in after
    assert not any(c.startswith(("mdadm --create", "mkfs.xfs", "modprobe")) for c in after)
    assert "mount -o noatime /dev/md/ndfleet-nvme /mnt/resource_nvme" in after
    assert set(PROD_MOUNTS) <= set(node.mounts())


def test_a_reimaged_node_with_empty_nvme_is_set_up_again(node):
    node.setup()
    reimage(node.root)
    node.cloud_init()
    before = len(calls(node.root))
    run = node.setup()
    assert run.rc == 0
    after = calls(node.root)[before:]
    assert any(c.startswith("mdadm --create") for c in after) and "mkfs.xfs -q -f /dev/md/ndfleet-nvme" in after
    assert set(PROD_MOUNTS) <= set(node.mounts())


def test_a_failing_mount_is_retried_then_reported_by_the_validator(tmp_path, bundle):
    node = Node(tmp_path, bundle, ("blob_fail",))
    run = node.setup()
    assert run.rc == 0  # set-up carries on; the validator judges
    blob = steps(run)["blob"]
    assert blob["status"] == "failed"
    assert "failed to authenticate credentials" in blob["message"]
    attempts = [c for c in calls(node.root) if c.startswith("blobfuse2 mount /mnt/blob/datasets")]
    assert len(attempts) >= 2, "the mount must be retried before set-up gives up"
    assert steps(run)["lustre"]["status"] == "ok"  # one failed step does not stop the others
    r = node.validate(tmp_path / "v")
    assert r.rc == 1 and r.failed == {"host.mounts"}
    message = r.check("host.mounts")["message"]
    assert "not mounted: /mnt/blob/datasets /mnt/blob/checkpoints" in message
    assert "set-up step blob failed: blob container datasets mounted at /mnt/blob/datasets failed after" in message


def test_a_flaky_lustre_mount_succeeds_on_a_later_attempt(tmp_path, bundle):
    node = Node(tmp_path, bundle, ("lustre_flaky",))
    run = node.setup()
    assert steps(run)["lustre"]["status"] == "ok"
    assert steps(run)["lustre"]["message"].endswith("(attempt 3)")
    assert "/mnt/lustre" in node.mounts()


def test_no_unused_nvme_fails_the_step_clearly(tmp_path, bundle):
    node = Node(tmp_path, bundle)
    for disk in (node.root / "dev").glob("nvme*n1"):
        disk.unlink()
    run = node.setup()
    assert steps(run)["nvme"] == {
        "step": "nvme", "status": "failed", "message": "no unused local NVMe disk found; /mnt/resource_nvme not created"
    }  # fmt: skip


def test_unreadable_node_json_cannot_run(tmp_path, bundle):
    broken = tmp_path / "bundle"
    shutil.copytree(bundle, broken)
    (broken / "node.json").write_text("{not json")
    node = Node(tmp_path / "n", broken)
    run = node.setup()
    assert run.rc == 2 and "not valid JSON" in run.stderr and "Traceback" not in run.stderr


def test_sovereign_cloud_blob_suffix_comes_from_the_node_json(bundle):
    assert "endpoint: https://acct.blob.core.usgovcloudapi.net" in blobfuse2_config(
        "acct", "data", "/cache", "", "blob.core.usgovcloudapi.net"
    )
    rendered = json.loads((bundle / "node.json").read_text())
    base = {**{k: rendered[k] for k in ("hardware", "thresholds")}, "schema": 1, "stack": "s", "island": "i",
            "vm_size": "v", "paths": {}, "validation": {}, "timeouts": {}}  # fmt: skip
    assert parse(json.dumps({**base, "mounts": {}})).blob_endpoint_suffix == "blob.core.windows.net"
    sovereign = {**base, "mounts": {"blob_endpoint_suffix": "blob.core.chinacloudapi.cn"}}
    assert parse(json.dumps(sovereign)).blob_endpoint_suffix == "blob.core.chinacloudapi.cn"


def test_mount_retries_end_before_the_set_up_unit_is_killed(bundle):
    from ndfleet_node.runner import Runner
    from ndfleet_node.setup import SETUP_MARGIN_S, SetupContext

    data = json.loads((bundle / "node.json").read_text())
    data["timeouts"].update({"mount_retry": 240, "setup": 600})
    ctx = SetupContext(parse(json.dumps(data)), Runner())
    assert ctx.mount_deadline() <= ctx.started + 600 - SETUP_MARGIN_S
    ctx2 = SetupContext(parse(json.dumps(data)), Runner())
    ctx2.started -= 500  # set-up already ran 500 s: the retries get what is left, not 240 s
    assert ctx2.mount_deadline() <= ctx2.started + 600 - SETUP_MARGIN_S


def test_the_retry_window_fits_the_set_up_budget_of_every_vm_size():
    from ndfleet.stackconfig.profiles import PROFILES

    for profile in PROFILES.values():
        t = profile.thresholds
        assert t.mount_retry_s + t.fabricmanager_wait_s <= t.setup_timeout_s, profile.name


# BlobFuse2 (issue 25): the HPC image has none, and its apt lists are cleared (docs/bootstrap.md).
APT_LOCK_LINE = "(apt.lock held)"


def test_blobfuse2_is_installed_under_the_apt_lock_before_the_first_mount(tmp_path, bundle):
    node = Node(tmp_path, bundle, ("fm_stopped",), missing=("blobfuse2",))
    run = node.setup()
    assert steps(run)["blob"]["status"] == "ok", steps(run)["blob"]
    assert steps(run)["blob"]["message"].startswith("blobfuse2 installed (attempt 1); ")
    done = calls(node.root)
    apt = [c for c in done if c.startswith("apt-get ")]
    assert apt == [
        f"apt-get -q -o DPkg::Lock::Timeout=60 -o Acquire::Retries=3 update {APT_LOCK_LINE}",
        f"apt-get -q -o DPkg::Lock::Timeout=60 -o Acquire::Retries=3 -y install blobfuse2 {APT_LOCK_LINE}",
    ]
    first_mount = next(i for i, c in enumerate(done) if c.startswith("blobfuse2 mount"))
    assert done.index(apt[-1]) < first_mount
    assert {"/mnt/blob/datasets", "/mnt/blob/checkpoints"} <= set(node.mounts())


def test_a_failed_install_is_tried_again(tmp_path, bundle):
    node = Node(tmp_path, bundle, ("fm_stopped", "apt_flaky"), missing=("blobfuse2",))
    run = node.setup()
    assert steps(run)["blob"]["message"].startswith("blobfuse2 installed (attempt 2); "), steps(run)["blob"]
    assert len([c for c in calls(node.root) if c.startswith("apt-get") and " update " in c]) == 2


def test_an_install_that_never_works_fails_the_step_by_name_after_bounded_tries(tmp_path, bundle):
    node = Node(tmp_path, bundle, ("fm_stopped", "apt_down"), missing=("blobfuse2",))
    run = node.setup()
    blob = steps(run)["blob"]
    assert blob["status"] == "failed"
    assert blob["message"].startswith("blobfuse2 could not be installed after 3 attempt(s): apt-get update: ")
    assert "apt-get install blobfuse2: " in blob["message"] and "Temporary failure resolving" in blob["message"]
    assert len([c for c in calls(node.root) if c.startswith("apt-get") and " install " in c]) == 3
    assert not [c for c in calls(node.root) if c.startswith("blobfuse2 mount")]
    assert steps(run)["lustre"]["status"] == "ok"


def test_a_stack_without_blob_containers_installs_nothing(tmp_path, bundle):
    plain = tmp_path / "bundle"
    shutil.copytree(bundle, plain)
    data = json.loads((plain / "node.json").read_text())
    data["mounts"]["expected"] = [m for m in data["mounts"]["expected"] if not m.startswith("/mnt/blob/")]
    data["mounts"]["blob"] = []
    (plain / "node.json").write_text(json.dumps(data))
    node = Node(tmp_path / "n", plain, ("fm_stopped",), missing=("blobfuse2",))
    run = node.setup()
    assert steps(run)["blob"] == {"step": "blob", "status": "ok", "message": "the stack has no blob containers"}
    assert not [c for c in calls(node.root) if c.startswith("apt-get")]


@pytest.mark.needs_tool("flock")
def test_the_install_waits_for_the_slurm_setup_holding_the_same_lock(tmp_path, bundle):
    # ndfleet-slurm-setup takes the lock with flock(1) (templates/slurm/ndfleet-slurm-setup.sh.j2); the set-up with
    # flock(2): the same lock. Here flock(1) holds it for 3 s while the set-up starts.
    node = Node(tmp_path, bundle, ("fm_stopped",), missing=("blobfuse2",))
    lock = node.root / "run" / "ndfleet" / "apt.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    released = node.root / "released"
    holder = subprocess.Popen(["flock", str(lock), "sh", "-c", f"sleep 3; touch {released}"])
    try:
        time.sleep(0.5)
        run = node.setup()
    finally:
        holder.wait(timeout=30)
    assert steps(run)["blob"]["status"] == "ok", steps(run)["blob"]
    update_log = next(c for c in calls(node.root) if c.startswith("apt-get") and " update " in c)
    assert update_log.endswith(APT_LOCK_LINE)
    # The first apt call came after the holder let go: its file existed before the set-up's apt-get ran.
    assert released.stat().st_mtime <= (node.root / "var" / "fake" / "apt-installs").stat().st_mtime


def test_the_apt_lock_is_the_machines_own_not_the_hardware_trees(tmp_path, bundle):
    # ndfleet-slurm-setup (shell, flock(1)) takes the machine's /run/ndfleet/apt.lock; the set-up must take the same
    # file even where a hardware stand-in tree (NDFLEET_SYSROOT) is set, as in the twin, which found them apart.
    from ndfleet_node.runner import Runner
    from ndfleet_node.setup import SetupContext
    from ndfleet_node.setup.apt import apt_lock

    data = json.loads((bundle / "node.json").read_text())
    data["paths"]["apt_lock"] = str(tmp_path / "machine-run" / "apt.lock")
    ctx = SetupContext(parse(json.dumps(data)), Runner(), sysroot=str(tmp_path / "hardware-tree"))
    with apt_lock(ctx, time.monotonic() + 10):
        assert (tmp_path / "machine-run" / "apt.lock").exists()
    assert not (tmp_path / "hardware-tree").exists()


def test_node_json_keys_are_the_typed_sections_fields(bundle):
    """A key spelled otherwise than ndfleet_node.config.Hardware / Thresholds (as the tool once renamed
    hca_pcie_gen to hca_pcie_speed on the way) stops the program at parse time, naming the key."""
    from ndfleet_node.config import ConfigError

    data = json.loads((bundle / "node.json").read_text())
    parse(json.dumps(data))  # as rendered: reads
    data["hardware"]["hca_pcie_speed"] = data["hardware"].pop("hca_pcie_gen")
    wrong = r"section hardware: .*unexpected keyword argument 'hca_pcie_speed'"
    with pytest.raises(ConfigError, match=wrong):
        parse(json.dumps(data))
    del data["hardware"]["hca_pcie_speed"]
    with pytest.raises(ConfigError, match=r"section hardware: .*missing 1 required .*'hca_pcie_gen'"):
        parse(json.dumps(data))
    data["hardware"]["hca_pcie_gen"] = 5
    with pytest.raises(ConfigError, match=r"section thresholds: .* must be a mapping"):
        parse(json.dumps({**data, "thresholds": []}))
