"""prepare at scale: islands of one shape share one island-neutral node bundle (rendered and xz-compressed once,
issue 30), and the Slurm template context is built once per site; neither may change what any island receives or
the order the islands come in."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ndfleet.monitoring import agent
from ndfleet.nodefiles import nodebundle
from ndfleet.nodefiles.bootstrap import bundle_shape, merge_extensions, render_bootstrap
from ndfleet.nodefiles.nodeconfig import node_config, to_json
from ndfleet.prepare import bootstrap_extensions, prepare
from ndfleet.slurm import conf, machines
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.conftest import base_config

REPO = Path(__file__).resolve().parents[1]


def _any_slot(text: Any) -> Any:
    """Text or bytes with every bundle slot's number and boot version left out: the slot numbers are in customData,
    so an island rendered alone has its own boot version (ndfleet/boot_version.py)."""
    if isinstance(text, bytes):
        text = re.sub(rb"ndfleet-bundle-[0-9]+", b"ndfleet-bundle-N", text)
        return re.sub(rb'(boot-|"boot_version": ?")[0-9a-f]{12}', rb"\1V", text)
    text = re.sub(r"ndfleet-bundle-[0-9]+", "ndfleet-bundle-N", text)
    return re.sub(r'(boot-|"boot_version": ?")[0-9a-f]{12}', r"\1V", text)


def _spec(stack: str) -> ClusterSpec:
    """prod: three Slurm islands of 100, 100 and 56 nodes; twin: 3 and 1 nodes and two elastic islands that differ."""
    path = REPO / ("tests/twin/Pulumi.twin.yaml" if stack == "twin" else f"stacks/Pulumi.{stack}.yaml")
    return load_spec(load_stack(path=path).ndfleet_config, stack)


def test_islands_come_in_order_each_with_its_own_bootstrap() -> None:
    spec = load_spec(base_config(nodes=700, maxNodesPerIsland=100, scheduler="slurm"), "t")
    prepared = prepare(spec)
    assert [p.island.name for p in prepared.islands] == [i.name for i in spec.islands]
    assert len(prepared.islands) == 7
    for p in prepared.islands:
        assert json.loads(p.bootstrap.files["node.json"])["island"] == p.island.name
        alone = render_bootstrap(spec, p.island, bootstrap_extensions(spec, p.island))
        assert p.bootstrap.bundle == alone.bundle and p.bootstrap.user_data == alone.user_data


@pytest.mark.parametrize("stack", ["prod", "twin"])
def test_a_shared_bundle_gives_each_island_what_rendering_it_alone_does(stack: str) -> None:
    """Islands of every size, index and elasticity: prepare's shared bundles against each island rendered on its
    own, and the filled-in files against the features rendered with the island's real name."""
    spec = _spec(stack)
    prepared = prepare(spec)
    for p in prepared.islands:
        alone = render_bootstrap(spec, p.island, bootstrap_extensions(spec, p.island))
        # Alone, an island's bundle takes the vault's first slots; in the stack, the slots after the bundles of the
        # islands before it (prepare lays distinct bundles into consecutive slots): only the slot numbers differ.
        assert p.bootstrap.bundle == alone.bundle
        assert _any_slot(p.bootstrap.user_data) == _any_slot(alone.user_data)
        assert p.bootstrap.node_files().keys() == alone.node_files().keys()
        assert {k: _any_slot(v) for k, v in p.bootstrap.node_files().items()} == {
            k: _any_slot(v) for k, v in alone.node_files().items()
        }
        files = p.bootstrap.node_files()
        features = [machines.bootstrap_extensions(spec, p.island), agent.bootstrap_extensions(spec, p.island)]
        named = merge_extensions(features)
        assert named is not None
        # The bundle's boot-version placeholder is filled with the island's own version (issue 42).
        token, version = nodebundle.BOOT_VERSION_PLACEHOLDER.encode(), p.boot_version.encode()
        for f in named.files:  # Slurm's and the metrics agent's files, rendered with the real name
            assert files[f.path] == f.data.replace(token, version), f.path
        as_rendered = to_json(node_config(spec, p.island, named.node_sections)).encode().replace(token, version)
        assert files["/etc/ndfleet/node.json"] == as_rendered
        for placeholder in (nodebundle.ISLAND_PLACEHOLDER, nodebundle.BOOT_VERSION_PLACEHOLDER):
            assert not any(placeholder.encode() in data for data in files.values())


@pytest.mark.parametrize("stack", ["prod", "twin"])
def test_islands_of_one_shape_share_one_user_data_and_their_custom_data_names_them(stack: str) -> None:
    spec = _spec(stack)
    nodebundle._compress.cache_clear()
    prepared = prepare(spec)
    shapes = {bundle_shape(i) for i in spec.islands}
    # What the nodes fetch: userData, or (a Slurm stack) the Key Vault parts, named after the bundle's sha256.
    assert len({(p.bootstrap.vm_user_data, *p.bootstrap.bundle_parts) for p in prepared.islands}) == len(shapes)
    # xz ran once per shape, not once per island, and once more for the Slurm controller's library bundle.
    controllers = [m for m in prepared.slurm_machines if m.role == "controller"]
    assert nodebundle._compress.cache_info().misses == len(shapes) + len(controllers)
    for p in prepared.islands:
        assert json.loads(p.bootstrap.files["bundle.json"])["island"] == p.island.name


def test_the_slurm_context_is_built_once_per_site_not_per_template() -> None:
    spec = load_spec(base_config(nodes=300, maxNodesPerIsland=100, scheduler="slurm"), "t")
    conf._context.cache_clear()
    for island in spec.islands:
        machines.slurm_node_files(spec, island)
    machines.machine_bootstrap(spec, "controller")
    info = conf._context.cache_info()
    assert info.misses == 1 and info.hits > 10, info
