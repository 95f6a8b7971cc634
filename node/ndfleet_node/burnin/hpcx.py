"""NVIDIA HPC-X, as the Azure HPC image ships it: where its `mpirun` and libraries are, for the burn-in's launchers.

On the Ubuntu HPC image HPC-X is unpacked under `/opt/hpcx-<version>-.../` and reached through the environment
module `mpi/hpcx`, which loads HPC-X's own modulefile (Azure/azhpc-images, `install_mpis.sh`); `mpirun` is on PATH
and Open MPI's libraries on LD_LIBRARY_PATH only after that. The burn-in does what HPC-X's README gives for a
shell without modules: `source $HPCX_HOME/hpcx-init.sh; hpcx_load`. The node JSON's `burnin.hpcx_init` is a glob
(default `/opt/hpcx-*/hpcx-init.sh`); the last match in sorted order (the newest version) is used.

- hostfile mode (`ndfleet-node burnin`, run by hand on a compute node): `hpcx_environment()` sources it once,
  here, and the tests run `mpirun` from that PATH with that LD_LIBRARY_PATH, which `-x LD_LIBRARY_PATH` carries to
  the remote ranks;
- Slurm mode (`burnin-slurm`, on the controller or login node, which have no HPC-X): each task sources it on its
  own compute node before it execs all_reduce_perf (`task_command`).
"""

from __future__ import annotations

import glob
import subprocess

LOAD_TIMEOUT_S = 30  # sourcing hpcx-init.sh reads a few files; a hung NFS /opt must not hang the burn-in


class HpcxError(Exception):
    pass


def find_init(pattern: str) -> str:
    matches = sorted(glob.glob(pattern))
    if not matches:
        raise HpcxError(f"cannot find HPC-X: nothing matches burnin.hpcx_init = {pattern!r} (on the Azure HPC image "
                        "HPC-X is /opt/hpcx-*/hpcx-init.sh; run the hostfile burn-in on a compute node)")  # fmt: skip
    return matches[-1]


def hpcx_environment(pattern: str, base: dict[str, str]) -> dict[str, str]:
    """The environment after `source hpcx-init.sh; hpcx_load`, starting from `base`."""
    init = find_init(pattern)
    script = '. "$1" >/dev/null && hpcx_load >/dev/null && env -0'
    try:
        proc = subprocess.run(["/bin/bash", "-c", script, "ndfleet-hpcx", init], env=base, capture_output=True,
                              timeout=LOAD_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise HpcxError(f"loading HPC-X ({init}; hpcx_load) took over {LOAD_TIMEOUT_S} s") from None
    except OSError as exc:
        raise HpcxError(f"cannot run /bin/bash to load HPC-X: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip()[:300]
        raise HpcxError(f"loading HPC-X failed ({init}; hpcx_load; exit {proc.returncode}): {why or 'no output'}")
    env: dict[str, str] = {}
    for item in proc.stdout.decode(errors="replace").split("\0"):
        name, sep, value = item.partition("=")
        if sep and name:
            env[name] = value
    return env


# Runs as each Slurm task on its compute node: load HPC-X there, then become all_reduce_perf. $1 is the glob (left
# unquoted in `for` on purpose: that expands it), the rest is the command.
_TASK_SCRIPT = (
    'pattern=$1; shift; init=; for f in $pattern; do [ -f "$f" ] && init=$f; done; '
    'if [ -z "$init" ]; then echo "ndfleet burn-in: cannot find HPC-X on $(hostname): nothing matches $pattern" >&2; '
    "exit 127; fi; "
    '. "$init" >/dev/null && hpcx_load >/dev/null || '
    '{ echo "ndfleet burn-in: hpcx_load failed ($init)" >&2; exit 127; }; '
    'exec "$@"'
)


def task_command(pattern: str, command: list[str]) -> list[str]:
    """`command` wrapped so it runs with HPC-X loaded on whichever node runs it (Slurm tasks)."""
    return ["/bin/bash", "-c", _TASK_SCRIPT, "ndfleet-burnin-task", pattern, *command]
