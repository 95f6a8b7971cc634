"""prepare at scale: islands render in a thread pool, and the Slurm template context is built once per site; neither
may change what any island receives or the order the islands come in."""

from __future__ import annotations

import json

from ndfleet.nodefiles.bootstrap import render_bootstrap
from ndfleet.prepare import bootstrap_extensions, prepare
from ndfleet.slurm import conf, machines
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config


def test_islands_come_in_order_each_with_its_own_bootstrap() -> None:
    spec = load_spec(base_config(nodes=700, maxNodesPerIsland=100, scheduler="slurm"), "t")
    prepared = prepare(spec)
    assert [p.island.name for p in prepared.islands] == [i.name for i in spec.islands]
    assert len(prepared.islands) == 7
    for p in prepared.islands:
        assert json.loads(p.bootstrap.files["node.json"])["island"] == p.island.name
        alone = render_bootstrap(spec, p.island, bootstrap_extensions(spec, p.island))
        assert p.bootstrap.bundle == alone.bundle and p.bootstrap.user_data == alone.user_data


def test_the_slurm_context_is_built_once_per_site_not_per_template() -> None:
    spec = load_spec(base_config(nodes=300, maxNodesPerIsland=100, scheduler="slurm"), "t")
    conf._context.cache_clear()
    for island in spec.islands:
        machines.slurm_node_files(spec, island)
    machines.machine_bootstrap(spec, "controller")
    info = conf._context.cache_info()
    assert info.misses == 1 and info.hits > 10, info
