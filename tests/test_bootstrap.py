"""The node bootstrap renderer: cloud-init user data, the files it carries, customData and its limit."""

from __future__ import annotations

import base64
import gzip
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from ndfleet import bootstrap
from ndfleet.bootstrap import (
    BASH_FILES,
    CUSTOM_DATA_MAX_BYTES,
    HEALTH_PATH,
    BootstrapTooLarge,
    build_context,
    render_bootstrap,
    validation_budget_s,
)
from ndfleet.spec.config import ClusterSpec, load_spec
from ndfleet.spec.stackfile import load_stack

EXAMPLE_STACKS = ("dev", "prod", "h200")
ONE_STACK_PER_VM_SIZE = ("dev", "h200")  # ND H100 v5, ND H200 v5
SHELLCHECK = Path(sys.executable).with_name("shellcheck")
# The Application Health extension's gracePeriod is at most 14,400 s (virtual-machine-scale-sets-health-extension.md).
HEALTH_GRACE_MAX_S = 14_400


def spec_of(stack: str, **overrides: Any) -> ClusterSpec:
    raw = load_stack(stack).ndfleet_config
    raw.update(overrides)
    return load_spec(raw, stack)


@pytest.fixture(scope="module", params=EXAMPLE_STACKS)
def stack_render(request: pytest.FixtureRequest) -> tuple[str, ClusterSpec, bootstrap.RenderedBootstrap]:
    spec = spec_of(request.param)
    return request.param, spec, render_bootstrap(spec, spec.islands[0])


def test_user_data_is_cloud_config(stack_render):
    _, _, r = stack_render
    assert r.user_data.startswith("#cloud-config\n")


def test_user_data_carries_every_file_byte_for_byte(stack_render):
    _, _, r = stack_render
    written = {w["path"]: w["content"] for w in yaml.safe_load(r.user_data)["write_files"]}
    assert written == {r.node_paths[name]: r.files[name] for name in r.node_paths}


def test_custom_data_is_base64_of_deterministic_gzip(stack_render):
    name, spec, r = stack_render
    raw = base64.b64decode(r.custom_data, validate=True)
    assert gzip.decompress(raw).decode() == r.user_data
    assert raw[4:8] == b"\0\0\0\0"  # gzip mtime 0
    assert render_bootstrap(spec, spec.islands[0]).custom_data == r.custom_data


def test_custom_data_headroom(stack_render):
    name, _, r = stack_render
    size = len(r.custom_data_bytes)
    print(f"{name}: customData {size:,} of {CUSTOM_DATA_MAX_BYTES:,} bytes ({r.headroom_bytes:,} to spare)")
    assert size <= CUSTOM_DATA_MAX_BYTES // 2, "less than half of Azure's customData limit left"


def test_oversized_bootstrap_names_stack_island_size_and_limit(monkeypatch):
    spec = spec_of("dev")
    monkeypatch.setattr(bootstrap, "CUSTOM_DATA_MAX_BYTES", 1000)
    with pytest.raises(BootstrapTooLarge) as e:
        render_bootstrap(spec, spec.islands[0])
    msg = str(e.value)
    assert "'dev'" in msg and "'ib00'" in msg and "1,000 bytes" in msg
    assert "bytes gzip-compressed" in msg


def _cloud_init() -> str:
    found = shutil.which("cloud-init")
    assert found, "cloud-init is not installed: apt-get install -y --no-install-recommends cloud-init"
    return found


@pytest.fixture(scope="module")
def external_checks(tmp_path_factory) -> dict[tuple[str, str], tuple[int, str]]:
    """cloud-init schema and shellcheck over the rendered files, all started at once (they take seconds each).

    Keys: ("schema", stack), ("shellcheck", stack/script), ("schema", "bad"); values (exit status, output).
    """
    folder = tmp_path_factory.mktemp("external")
    cloud_init = _cloud_init()
    jobs: dict[tuple[str, str], subprocess.Popen[str]] = {}

    def start(key: tuple[str, str], argv: list[str]) -> None:
        jobs[key] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    for stack in EXAMPLE_STACKS:
        spec = spec_of(stack)
        r = render_bootstrap(spec, spec.islands[0])
        user_data = folder / f"{stack}.user-data"
        user_data.write_text(r.user_data)
        start(("schema", stack), [cloud_init, "schema", "--config-file", str(user_data)])
        if stack not in ONE_STACK_PER_VM_SIZE:
            continue
        for script in BASH_FILES:
            path = folder / f"{stack}.{script}"
            path.write_text(r.files[script])
            start(("shellcheck", f"{stack}/{script}"), [str(SHELLCHECK), "--shell=bash", str(path)])
    bad = folder / "bad.user-data"
    bad.write_text("#cloud-config\nwrite_files: 5\nruncmd: {a: 1}\n")
    start(("schema", "bad"), [cloud_init, "schema", "--config-file", str(bad)])
    results = {}
    for key, proc in jobs.items():
        out, _ = proc.communicate(timeout=60)
        results[key] = (proc.returncode, out)
    return results


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_user_data_passes_cloud_init_schema(stack, external_checks):
    rc, out = external_checks[("schema", stack)]
    assert rc == 0, out


def test_cloud_init_schema_check_rejects_a_bad_config(external_checks):
    rc, out = external_checks[("schema", "bad")]
    assert rc != 0, out


@pytest.mark.parametrize("stack", ONE_STACK_PER_VM_SIZE)
@pytest.mark.parametrize("script", BASH_FILES)
def test_rendered_bash_passes_shellcheck(stack, script, external_checks):
    rc, out = external_checks[("shellcheck", f"{stack}/{script}")]
    assert rc == 0, out


@pytest.mark.parametrize("stack", ONE_STACK_PER_VM_SIZE)
def test_rendered_health_endpoint_compiles(stack):
    spec = spec_of(stack)
    compile(render_bootstrap(spec, spec.islands[0]).files["ndfleet-health"], "ndfleet-health", "exec")


def test_both_vm_sizes_render_their_own_figures():
    h100 = render_bootstrap(spec_of("dev"), spec_of("dev").islands[0]).files
    h200 = render_bootstrap(spec_of("h200"), spec_of("h200").islands[0]).files
    assert "readonly GPU_MODEL='NVIDIA H100 80GB HBM3'" in h100["validate-node"]
    assert "readonly GPU_MODEL='NVIDIA H200'" in h200["validate-node"]
    assert "readonly NCCL_BUSBW_GBPS=460.0" in h100["validate-node"]
    assert "readonly NCCL_BUSBW_GBPS=431.0" in h200["validate-node"]


def test_nccl_conf_has_the_topology_file_only_where_the_profile_names_one():
    h100 = render_bootstrap(spec_of("dev"), spec_of("dev").islands[0]).files["nccl.conf"]
    h200 = render_bootstrap(spec_of("h200"), spec_of("h200").islands[0]).files["nccl.conf"]
    assert "NCCL_TOPO_FILE=/opt/microsoft/ndv5-topo.xml" in h100.splitlines()
    assert "NCCL_IB_PCI_RELAXED_ORDERING=1" in h200.splitlines()
    assert "NCCL_TOPO_FILE" not in h200


def test_thresholds_come_from_the_profile():
    spec = spec_of("dev")
    t = spec.profile.thresholds.model_copy(update={"ib_write_bw_gbps": 123.5, "tool_timeout_s": 7})
    changed = spec.model_copy(update={"profile": spec.profile.model_copy(update={"thresholds": t})})
    script = render_bootstrap(changed, changed.islands[0]).files["validate-node"]
    assert "readonly IB_BW_GBPS=123.5" in script
    assert "readonly TOOL_TIMEOUT=7" in script


def test_templates_refuse_a_missing_value():
    with pytest.raises(jinja2.UndefinedError):
        bootstrap._template("node/nccl.conf.j2").render({})


def test_health_unit_serves_the_probe_port_and_path():
    spec = spec_of("dev", health={"probePort": 18555})
    unit = render_bootstrap(spec, spec.islands[0]).files["ndfleet-health.service"]
    assert f"--port 18555 --path {HEALTH_PATH} " in unit


def test_validation_level_comes_from_the_stack():
    spec = spec_of("dev", health={"validationLevel": "quick"})
    unit = render_bootstrap(spec, spec.islands[0]).files["ndfleet-validate.service"]
    assert "validate-node --level quick --report /run/ndfleet/report.json" in unit


def test_lustre_is_mounted_and_checked_only_where_the_stack_has_it():
    prod, dev = spec_of("prod"), spec_of("dev")
    assert "/mnt/lustre" in build_context(prod, prod.islands[0])["expected_mounts"]
    assert "/mnt/lustre" not in build_context(dev, dev.islands[0])["expected_mounts"]
    assert "readonly LUSTRE_ENABLED=1" in render_bootstrap(prod, prod.islands[0]).files["ndfleet-setup"]


def test_every_blob_container_is_mounted_with_the_managed_identity():
    spec = spec_of("dev")
    setup = render_bootstrap(spec, spec.islands[0]).files["ndfleet-setup"]
    for container in spec.storage.containers:
        assert f"mount_blob {container} /mnt/blob/{container} " in setup
    assert "mode: msi" in setup


def test_validated_target_requires_a_passed_validation():
    files = render_bootstrap(spec_of("dev"), spec_of("dev").islands[0]).files
    target = files["ndfleet-validated.target"]
    assert "Requires=ndfleet-validate.service" in target.splitlines()
    assert "After=ndfleet-validate.service" in target.splitlines()
    assert "Requires=ndfleet-setup.service" in files["ndfleet-validate.service"].splitlines()


def test_cloud_init_starts_validation_and_the_health_endpoint():
    user_data = yaml.safe_load(render_bootstrap(spec_of("dev"), spec_of("dev").islands[0]).user_data)
    assert ["systemctl", "enable", "--now", "ndfleet-health.service"] in user_data["runcmd"]
    assert ["systemctl", "start", "--no-block", "ndfleet-validated.target"] in user_data["runcmd"]


def test_islands_render_their_own_name():
    spec = spec_of("prod")
    first, last = (render_bootstrap(spec, i).files["validate-node"] for i in (spec.islands[0], spec.islands[-1]))
    assert "readonly ISLAND=ib00" in first and "readonly ISLAND=ib02" in last


def test_validation_budget_fits_the_health_grace_period():
    for stack in EXAMPLE_STACKS:
        assert validation_budget_s(spec_of(stack)) < HEALTH_GRACE_MAX_S


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_stack_grace_period_outlasts_set_up_and_validation(stack):
    # A node still validating must not be judged: the extension's grace period covers the worst case.
    spec = spec_of(stack)
    explicit = spec.health.probe_grace_period_seconds  # None: the grace period follows the budget
    assert explicit is None or validation_budget_s(spec) < explicit


def test_full_validation_budget_covers_the_perf_checks():
    full = spec_of("dev", health={"validationLevel": "full", "dcgmLevel": 3})
    quick = spec_of("dev", health={"validationLevel": "quick"})
    t = full.profile.thresholds
    extra = t.nccl_allreduce_timeout_s + t.ib_write_bw_timeout_s + t.nvbandwidth_timeout_s + t.dcgm_diag_timeout_s[2]
    assert validation_budget_s(full) - validation_budget_s(quick) == extra
