"""Mistakes in a stack's settings that once passed or misled (issue 44, items 5 and 7): each is refused with a message
naming the setting and what is valid, or warned about, as docs/configuration.md says."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.problems import SpecError
from tests.conftest import base_config, dev_ssh_key


def problems_of(config: dict[str, Any], stack: str = "test") -> str:
    with pytest.raises(SpecError) as info:
        load_spec(config, stack)
    return str(info.value)


# --- the admin SSH key: the whole blob, as RFC 4253 section 6.6 lays it out ---------------------------------------
def _cut(key: str, chars: int) -> str:
    key_type, blob, *_ = key.split()
    return f"{key_type} {blob[:-chars]}"


@pytest.mark.parametrize("chars", [4, 8, 20])
def test_an_ed25519_key_cut_at_a_base64_boundary_is_refused(chars: int) -> None:
    cut = _cut(dev_ssh_key(), chars)
    base64.b64decode(cut.split()[1], validate=True)  # still valid base64: only the structure shows the cut
    text = problems_of(base_config(sshPublicKey=cut))
    assert "ndfleet:sshPublicKey" in text and "cut short or damaged (a bad paste?)" in text


def test_a_key_cut_mid_group_is_named_as_cut() -> None:
    text = problems_of(base_config(sshPublicKey=_cut(dev_ssh_key(), 3)))
    assert "not valid base64 OpenSSH key data: the key is cut short or damaged" in text


def test_a_key_with_bytes_past_its_end_is_refused() -> None:
    key_type, blob, *_ = dev_ssh_key().split()
    longer = base64.b64encode(base64.b64decode(blob) + b"\0\0\0\0").decode()
    text = problems_of(base_config(sshPublicKey=f"{key_type} {longer}"))
    assert "4 bytes past its end" in text


def test_the_whole_key_passes() -> None:
    load_spec(base_config(), "test")


# --- the VNet's address space -------------------------------------------------------------------------------------
def test_an_address_without_a_prefix_is_refused_not_read_as_a_32() -> None:
    text = problems_of(base_config(vnetAddressSpace="10.70.0.0"))
    assert "ndfleet:vnetAddressSpace = '10.70.0.0': has no prefix length" in text and "10.70.0.0/16" in text


@pytest.mark.parametrize(
    ("cidr", "what"),
    [
        ("168.63.0.0/16", "168.63.129.16/32 (Azure's platform address"),
        ("169.254.0.0/16", "169.254.0.0/16 (link-local)"),
        ("127.0.0.0/8", "127.0.0.0/8 (loopback)"),
        ("224.0.0.0/8", "224.0.0.0/4 (multicast)"),
    ],
)
def test_ranges_azure_refuses_in_a_vnet_are_errors(cidr: str, what: str) -> None:
    text = problems_of(base_config(vnetAddressSpace=cidr))
    assert f"ndfleet:vnetAddressSpace = '{cidr}': overlaps {what}" in text


def test_a_public_range_still_only_warns() -> None:
    spec = load_spec(base_config(vnetAddressSpace="20.0.0.0/16"), "test")
    assert any("is not a private range: Azure routes it inside the VNet" in w for w in spec.warnings)


# --- a webhook URL (with its token) in clear text in the stack file -----------------------------------------------
TOKEN_URL = "https://example.webhook.office.com/webhookb2/abc/IncomingWebhook/SECRETTOKEN123"


def test_a_clear_text_webhook_warns_and_says_how_to_encrypt_it(tmp_path, capsys) -> None:
    from ndfleet.cli import main

    key = dev_ssh_key()
    stack = tmp_path / "Pulumi.hooks.yaml"
    stack.write_text(
        "config:\n  ndfleet:location: eastus\n  ndfleet:nodes: 2\n"
        f"  ndfleet:sshPublicKey: {key}\n"
        f"  ndfleet:monitoring:\n    enabled: true\n    webhooks:\n      - {TOKEN_URL}\n"
    )
    assert main(["plan", "--stack-file", str(stack)]) == 0
    out = capsys.readouterr().out
    assert "ndfleet:monitoring.webhooks[0] written in clear text in Pulumi.hooks.yaml" in out
    assert "pulumi config set --secret --path 'ndfleet:monitoring.webhooks[0]' URL" in out
    assert "SECRETTOKEN123" not in out


def test_an_encrypted_webhook_does_not_warn() -> None:
    from pathlib import Path

    from ndfleet.stackconfig.stackfile import StackFile

    config = {"ndfleet:monitoring": {"enabled": True, "webhooks": [{"secure": "v1:abc"}]}}
    assert StackFile.from_config("s", Path("Pulumi.s.yaml"), config).warnings == ()
    config["ndfleet:monitoring"]["webhooks"].append(TOKEN_URL)
    assert StackFile.from_config("s", Path("Pulumi.s.yaml"), config).warnings[0].startswith(
        "ndfleet:monitoring.webhooks[1] written in clear text"
    )


# --- one rule for an island of one node under Slurm: fixed, elastic or split off by `nodes` ---------------------
LONE = "a node alone in its island would stay drained awaiting burn-in for good"


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"islands": [{"name": "a", "nodes": 1}]}, "ndfleet:islands[0].nodes = 1"),
        ({"islands": [{"name": "a", "elastic": {"maxNodes": 1}}]}, "ndfleet:islands[0].elastic.maxNodes = 1"),
        ({"nodes": 1}, "ndfleet:nodes = 1"),
        ({"nodes": 101}, "ndfleet:nodes = 101 (100 + 1 nodes)"),
    ],
)
def test_an_island_of_one_node_is_refused_with_slurm(overrides: dict[str, Any], setting: str) -> None:
    config = base_config(scheduler="slurm", bastion=True, **overrides)
    if "islands" in overrides:
        config.pop("nodes")
    text = problems_of(config)
    assert f"{setting}: with Slurm an island's nodes take jobs only once they pass the fabric burn-in" in text
    assert LONE in text


def test_an_island_of_one_node_is_fine_without_slurm() -> None:
    assert [i.nodes for i in load_spec(base_config(nodes=101), "t").islands] == [100, 1]
    load_spec(base_config(nodes=None, islands=[{"name": "a", "nodes": 1}]), "t")


# --- did you mean: a VM size in the wrong case, a smoke base misspelt ----------------------------------------------
def test_a_vm_size_in_lower_case_is_refused_with_its_exact_spelling() -> None:
    text = problems_of(base_config(vmSize="standard_nd96isr_h100_v5"))
    assert (
        "ndfleet:vmSize = 'standard_nd96isr_h100_v5': unsupported VM size; did you mean 'Standard_ND96isr_H100_v5' "
        "(the spelling Azure lists; ndfleet takes no other)?"
    ) in text


def test_a_vm_size_one_letter_off_gets_a_guess() -> None:
    text = problems_of(base_config(vmSize="Standard_ND96isr_H200_v4"))
    assert "did you mean 'Standard_ND96isr_H200_v5'?" in text


def test_a_misspelt_smoke_base_gets_a_guess(tmp_path: Path) -> None:
    import yaml

    from ndfleet.stackconfig.stackfile import StackFileError, load_stack

    base = {"ndfleet:location": "eastus", "ndfleet:sshPublicKey": dev_ssh_key(), "ndfleet:nodes": 2}
    (tmp_path / "Pulumi.train.yaml").write_text(yaml.safe_dump({"config": base}))
    smoke = {"ndfleet:smoke": {"of": "trian"}, "ndfleet:location": "eastus", "ndfleet:sshPublicKey": dev_ssh_key()}
    (tmp_path / "Pulumi.train-smoke.yaml").write_text(yaml.safe_dump({"config": smoke}))
    with pytest.raises(StackFileError) as info:
        load_stack(path=tmp_path / "Pulumi.train-smoke.yaml")
    assert "ndfleet:smoke.of = 'trian': no such stack" in str(info.value)
    assert "did you mean of: train? known stacks: train, train-smoke" in str(info.value)


# --- the resource-name prefix: never cut, never a double dash ----------------------------------------------------
def test_a_stack_name_too_long_for_the_prefix_is_refused_not_cut() -> None:
    text = problems_of(base_config(), stack="research-cluster-h200-a")
    assert "stack name 'research-cluster-h200-a' makes a resource-name prefix of 23 characters" in text
    assert "ndfleet does not cut it, since a cut prefix ('research-cluster-h20') could be another stack's" in text


def test_two_long_stack_names_cannot_share_a_prefix() -> None:
    """Each is refused, or each names its own prefix: the two can no longer end up with one."""
    for stack in ("research-cluster-h200-a", "research-cluster-h200-b"):
        problems_of(base_config(), stack=stack)
    a = load_spec(base_config(namePrefix="research-h200-a"), "research-cluster-h200-a")
    b = load_spec(base_config(namePrefix="research-h200-b"), "research-cluster-h200-b")
    assert a.name_prefix != b.name_prefix


def test_a_twenty_character_stack_name_is_its_prefix() -> None:
    assert load_spec(base_config(), "abcdefghij-klmnopqrs").name_prefix == "abcdefghij-klmnopqrs"


@pytest.mark.parametrize("stack", ["a..b", "team__x", "x--y"])
def test_a_default_prefix_has_no_double_dash(stack: str) -> None:
    assert "--" not in load_spec(base_config(), stack).name_prefix


@pytest.mark.parametrize("prefix", ["ab-", "a--b"])
def test_a_name_prefix_with_a_trailing_or_double_dash_is_refused(prefix: str) -> None:
    assert f"ndfleet:namePrefix = '{prefix}'" in problems_of(base_config(namePrefix=prefix))


def test_two_stacks_with_one_prefix_beside_each_other_are_warned_about(tmp_path: Path) -> None:
    import yaml

    from ndfleet.stackconfig.stackfile import load_stack

    base = {"ndfleet:location": "eastus", "ndfleet:sshPublicKey": dev_ssh_key(), "ndfleet:nodes": 2}
    (tmp_path / "Pulumi.team-a.yaml").write_text(yaml.safe_dump({"config": base}))
    (tmp_path / "Pulumi.team-b.yaml").write_text(yaml.safe_dump({"config": {**base, "ndfleet:namePrefix": "team-a"}}))
    (tmp_path / "Pulumi.team-c.yaml").write_text(yaml.safe_dump({"config": base}))
    warned = [w for w in load_stack(path=tmp_path / "Pulumi.team-b.yaml").warnings if "namePrefix" in w]
    assert warned == [
        "ndfleet:namePrefix: stack 'team-b' names its resources and hosts 'team-a-...', as stack(s) 'team-a' beside it "
        "do; in one subscription `ndfleet status`, the alerts and goodput could not tell their scale sets and nodes "
        "apart: give each its own ndfleet:namePrefix"
    ]
    assert not [w for w in load_stack(path=tmp_path / "Pulumi.team-c.yaml").warnings if "namePrefix" in w]
