"""The burn-in's figures and tool locations: the `burnin` section of the node JSON (/etc/ndfleet/node.json).

The tool renders the section from the VM-size profile (`ndfleet.nodefiles.burnin_node_config.burnin_node_section`), so
every floor, timeout and NCCL setting has one source; the node program only reads it. Keys are snake_case as
written in the JSON. A missing or malformed key is reported with its name, the value and what is valid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ndfleet_node import config as node_config
from ndfleet_node import hpcx

LEVELS = ("quick", "full")


class SettingsError(Exception):
    """The node JSON cannot drive a burn-in; the message names every bad key."""


@dataclass(frozen=True)
class BurninSettings:
    gpus_per_node: int
    pair_floor_gbps: float
    island_floor_gbps: float
    message_bytes: int
    warmup_iters: int
    iters: dict[str, int]  # per level
    # A test's timeout: its expected duration at the floor plus these (runner.timeout_for), unless overridden.
    launch_allowance_s: float
    launch_allowance_per_node_s: float
    nccl_env: dict[str, str]  # every test
    pair_env: dict[str, str]  # 2-node tests only (e.g. NCCL_ALGO=Ring: measure the fabric, not an algorithm)
    island_env: dict[str, str]  # the island-wide test only
    mpirun: str = "mpirun"
    mpirun_args: tuple[str, ...] = ()
    # MPI's own settings (UCX transport and device for MPI's bootstrap): `-x NAME=VALUE` for mpirun, the
    # environment srun exports for Slurm tasks.
    mpi_env: dict[str, str] = field(default_factory=dict)
    all_reduce_perf: str = "/opt/nccl-tests/build/all_reduce_perf"
    # Glob of HPC-X's hpcx-init.sh (ndfleet_node.hpcx, shared with the validator); "" = use `mpirun` as found on
    # PATH, load nothing.
    hpcx_init: str = hpcx.DEFAULT_INIT
    srun: str = "srun"
    max_rounds: int = 8
    max_parallel: int = 0  # tests of a round at once; 0 = all
    kill_grace_s: float = 5.0
    timeout_override_s: int | None = None  # --test-timeout: every test gets exactly this
    extra: dict[str, Any] = field(default_factory=dict)


def _need(section: dict[str, Any], key: str, kind: type | tuple[type, ...], problems: list[str]) -> Any:
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        problems.append(f"burnin.{key} = {value!r}: expected {want}")
        return None
    return value


def _per_level(section: dict[str, Any], key: str, problems: list[str]) -> dict[str, int]:
    value = section.get(key)
    if not isinstance(value, dict) or any(not isinstance(value.get(lvl), int) or value[lvl] <= 0 for lvl in LEVELS):
        problems.append(f"burnin.{key} = {value!r}: expected {{'quick': positive int, 'full': positive int}}")
        return {}
    return {lvl: int(value[lvl]) for lvl in LEVELS}


def _env(section: dict[str, Any], key: str, problems: list[str]) -> dict[str, str]:
    value = section.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        problems.append(f"burnin.{key} = {value!r}: expected an object of NCCL variable name -> string value")
        return {}
    return dict(value)


def settings_from_section(section: Any) -> BurninSettings:
    if not isinstance(section, dict):
        raise SettingsError(f"node JSON has no 'burnin' object (got {type(section).__name__})")
    problems: list[str] = []
    gpus = _need(section, "gpus_per_node", int, problems)
    pair_floor = _need(section, "pair_busbw_floor_gbps", (int, float), problems)
    island_floor = _need(section, "island_busbw_floor_gbps", (int, float), problems)
    message = _need(section, "message_bytes", int, problems)
    warmup = _need(section, "warmup_iters", int, problems)
    iters = _per_level(section, "iters", problems)
    launch = _need(section, "launch_allowance_s", (int, float), problems)
    launch_per_node = _need(section, "launch_allowance_per_node_s", (int, float), problems)
    nccl_env = _env(section, "nccl_env", problems)
    pair_env = _env(section, "pair_env", problems)
    island_env = _env(section, "island_env", problems)
    mpi_env = _env(section, "mpi_env", problems)
    mpirun_args = section.get("mpirun_args", [])
    if not isinstance(mpirun_args, list) or not all(isinstance(a, str) for a in mpirun_args):
        problems.append(f"burnin.mpirun_args = {mpirun_args!r}: expected a list of strings")
    optional: dict[str, Any] = {}
    for key, attr, kind in (
        ("mpirun", "mpirun", str),
        ("all_reduce_perf", "all_reduce_perf", str),
        ("hpcx_init", "hpcx_init", str),
        ("srun", "srun", str),
        ("max_rounds", "max_rounds", int),
        ("max_parallel", "max_parallel", int),
    ):
        if key in section:
            value = _need(section, key, kind, problems)
            if value is not None:
                optional[attr] = value
    for key, value in (("gpus_per_node", gpus), ("pair_busbw_floor_gbps", pair_floor),
                       ("island_busbw_floor_gbps", island_floor), ("message_bytes", message),
                       ("launch_allowance_s", launch)):  # fmt: skip
        if value is not None and value <= 0:
            problems.append(f"burnin.{key} = {value!r}: must be greater than 0")
    if launch_per_node is not None and launch_per_node < 0:
        problems.append(f"burnin.launch_allowance_per_node_s = {launch_per_node!r}: must be 0 or more")
    if warmup is not None and warmup < 0:
        problems.append(f"burnin.warmup_iters = {warmup!r}: must be 0 or more")
    if problems:
        raise SettingsError("invalid burn-in settings in the node JSON:\n  - " + "\n  - ".join(problems))
    return BurninSettings(
        gpus_per_node=gpus,
        pair_floor_gbps=float(pair_floor),
        island_floor_gbps=float(island_floor),
        message_bytes=message,
        warmup_iters=warmup,
        iters=iters,
        launch_allowance_s=float(launch),
        launch_allowance_per_node_s=float(launch_per_node),
        nccl_env=nccl_env,
        pair_env=pair_env,
        island_env=island_env,
        mpi_env=mpi_env,
        mpirun_args=tuple(mpirun_args),
        **optional,
    )


def load_settings(path: str | Path | None = None) -> BurninSettings:
    """The `burnin` section of the node JSON (`ndfleet_node.config`: --config, else $NDFLEET_NODE_CONFIG, else
    /etc/ndfleet/node.json)."""
    try:
        cfg = node_config.load(str(path) if path is not None else None)
    except node_config.ConfigError as exc:
        raise SettingsError(str(exc)) from None
    return settings_from_section(cfg.data.get("burnin"))
