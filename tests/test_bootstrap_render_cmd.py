"""`ndfleet render`: the bootstrap of a stack, written as files."""

from __future__ import annotations

import base64
import gzip

from ndfleet.cli import main
from ndfleet.commands import render
from ndfleet.nodefiles import bootstrap
from ndfleet.nodefiles.bootstrap import render_output_files
from ndfleet.prepare import bootstrap_extensions
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack

SCRIPTS = ("validate-node", "ndfleet-node")
UNITS = ("ndfleet-setup.service", "ndfleet-validate.service", "ndfleet-validated.target", "ndfleet-health.service")
# customData: the cloud-config and the boot step it carries.
BOOT_STEP = ("user-data", "custom-data.b64", "ndfleet-unpack", "bundle.json", "ndfleet-bundle.service",
             "ndfleet-bundle-failed.service")  # fmt: skip


def feature_file_names(stack: str) -> set[str]:
    """The names of the files Slurm and monitoring add to the stack's bundle (a drop-in as `<unit>.d-<name>`)."""
    spec = load_spec(load_stack(stack).ndfleet_config, stack)
    ext = bootstrap_extensions(spec, spec.islands[0])
    return {f.name for f in ext.files} if ext else set()


def test_single_island_stack_writes_every_file(tmp_path):
    assert main(["render", "--stack", "dev", "--out", str(tmp_path)]) == 0
    names = {p.name for p in (tmp_path / "compute").iterdir()}
    spec = load_spec(load_stack("dev").ndfleet_config, "dev")
    r = bootstrap.render_bootstrap(spec, spec.islands[0], bootstrap_extensions(spec, spec.islands[0]))
    parts = {f"{name}.b64" for name in r.bundle_parts}  # dev runs Slurm: its bundle travels in Key Vault parts
    assert len(parts) >= 2
    bundle = {*parts, "nccl.conf", "node.json", *SCRIPTS, *UNITS, *feature_file_names("dev")}
    assert names == {*BOOT_STEP, *bundle}


def test_a_drop_in_is_written_under_its_unit_and_name(tmp_path):
    main(["render", "--stack", "dev", "--out", str(tmp_path)])
    tmp_path = tmp_path / "compute"
    spec = load_spec(load_stack("dev").ndfleet_config, "dev")
    r = bootstrap.render_bootstrap(spec, spec.islands[0], bootstrap_extensions(spec, spec.islands[0]))
    dropin = "/etc/systemd/system/slurmd.service.d/ndfleet.conf"
    assert (tmp_path / "slurmd.service.d-ndfleet.conf").read_bytes() == r.node_files()[dropin]


def test_user_data_file_is_what_the_scale_set_receives(tmp_path):
    main(["render", "--stack", "h200", "--out", str(tmp_path)])
    tmp_path = tmp_path / "compute"
    spec = load_spec(load_stack("h200").ndfleet_config, "h200")  # no Slurm: its bundle travels in userData
    r = bootstrap.render_bootstrap(spec, spec.islands[0], bootstrap_extensions(spec, spec.islands[0]))
    assert r.vm_user_data and (tmp_path / "vm-user-data.b64").read_text() == r.vm_user_data + "\n"


def test_each_key_vault_part_file_is_what_the_vault_receives(tmp_path):
    main(["render", "--stack", "dev", "--out", str(tmp_path)])
    tmp_path = tmp_path / "compute"
    spec = load_spec(load_stack("dev").ndfleet_config, "dev")
    r = bootstrap.render_bootstrap(spec, spec.islands[0], bootstrap_extensions(spec, spec.islands[0]))
    assert r.bundle_parts
    for name, value in r.bundle_parts.items():
        assert (tmp_path / f"{name}.b64").read_text() == value + "\n"


def test_written_files_are_the_rendered_ones(tmp_path):
    main(["render", "--stack", "dev", "--out", str(tmp_path)])
    tmp_path = tmp_path / "compute"
    spec = load_spec(load_stack("dev").ndfleet_config, "dev")
    rendered = render_output_files(spec, spec.islands[0], bootstrap_extensions(spec, spec.islands[0]))
    assert {n: (tmp_path / n).read_bytes() for n in rendered} == {n: data for n, (data, _) in rendered.items()}


def test_custom_data_file_decodes_to_the_user_data(tmp_path):
    main(["render", "--stack", "dev", "--out", str(tmp_path)])
    tmp_path = tmp_path / "compute"
    decoded = gzip.decompress(base64.b64decode((tmp_path / "custom-data.b64").read_text())).decode()
    assert decoded == (tmp_path / "user-data").read_text()


def test_scripts_are_executable(tmp_path):
    main(["render", "--stack", "dev", "--out", str(tmp_path)])
    tmp_path = tmp_path / "compute"
    assert all((tmp_path / s).stat().st_mode & 0o111 for s in SCRIPTS)


def test_islands_that_differ_get_their_own_folder(tmp_path):
    assert main(["render", "--stack", "prod", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "compute").iterdir()) == ["ib00", "ib01", "ib02"]
    assert (tmp_path / "compute" / "ib02" / "validate-node").exists()


def test_each_machine_kind_gets_its_folder(tmp_path):
    assert main(["render", "--stack", "prod", "--out", str(tmp_path)]) == 0
    # and the manifest of what render wrote (docs/cli.md: a later render removes what this one no longer writes)
    assert sorted(p.name for p in tmp_path.iterdir()) == [render.MANIFEST, "compute", "slurm-controller", "slurm-login"]


def test_a_stack_without_slurm_has_only_compute_nodes(tmp_path):
    assert main(["render", "--stack", "h200", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [render.MANIFEST, "compute"]


def test_slurm_machine_scripts_keep_their_modes(tmp_path):
    main(["render", "--stack", "dev", "--out", str(tmp_path)])
    assert (tmp_path / "slurm-controller" / "ndfleet-slurm-setup").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "slurm-controller" / "slurm.conf").stat().st_mode & 0o777 == 0o644


def test_output_says_what_was_written(tmp_path, capsys):
    main(["render", "--stack", "dev", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    written = len(list((tmp_path / "compute").iterdir()))
    assert f"compute, island ib00: {written} files in {tmp_path / 'compute'}/" in out
    assert "customData" in out and "userData" in out and "validate-node" in out


def test_bad_config_exits_2_with_the_spec_message(tmp_path, capsys):
    stack_file = tmp_path / "Pulumi.broken.yaml"
    stack_file.write_text("config:\n  ndfleet:location: eastus\n  ndfleet:nodes: 0\n")
    assert main(["render", "--stack-file", str(stack_file), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "ndfleet:nodes" in err and "ndfleet:sshPublicKey is required" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_unknown_stack_exits_2(tmp_path, capsys):
    assert main(["render", "--stack", "no-such-stack", "--out", str(tmp_path)]) == 2
    assert "no-such-stack" in capsys.readouterr().err
