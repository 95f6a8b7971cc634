"""NVIDIA HPC-X, as the Azure HPC image ships it: where its `mpirun` and libraries are, for the burn-in's launchers.

On the Ubuntu HPC image HPC-X is unpacked under `/opt/hpcx-<version>-.../` and reached through the environment
module `mpi/hpcx`, which loads HPC-X's own modulefile (Azure/azhpc-images, `install_mpis.sh`); `mpirun` is on PATH
and Open MPI's libraries on LD_LIBRARY_PATH only after that. The burn-in does what HPC-X's README gives for a
shell without modules: `source $HPCX_HOME/hpcx-init.sh; hpcx_load`. The node JSON's `burnin.hpcx_init` is a glob
(default `/opt/hpcx-*/hpcx-init.sh`); the last match in sorted order (the newest version) is used.

- hostfile mode (`ndfleet-node burnin`, run by hand on a compute node): each test's `mpirun` runs under
  `with_hpcx`, so it is HPC-X's mpirun, and `-x LD_LIBRARY_PATH` carries HPC-X's library path to the remote ranks;
- Slurm mode (`burnin-slurm`, on the controller or login node, which have no HPC-X): each Slurm task loads it on
  its own compute node before it execs all_reduce_perf.
"""

from __future__ import annotations

import glob


class HpcxError(Exception):
    pass


def find_init(pattern: str) -> str:
    """The newest hpcx-init.sh matching `pattern` here, or HpcxError naming the setting."""
    matches = sorted(glob.glob(pattern))
    if not matches:
        raise HpcxError(f"cannot find HPC-X: nothing matches burnin.hpcx_init = {pattern!r}")
    return matches[-1]


# Loads HPC-X on whichever node runs it, then becomes the command. $1 is the glob (left unquoted in `for` on purpose:
# that expands it; the last match, in sorted order, is the newest version), the rest is the command.
_TASK_SCRIPT = (
    'p=$1; shift; i=; for f in $p; do [ -f "$f" ] && i=$f; done; '
    '[ -n "$i" ] && . "$i" >/dev/null && hpcx_load >/dev/null || { echo "no HPC-X: $p" >&2; exit 127; }; '
    'exec "$@"'
)


def with_hpcx(pattern: str, command: list[str]) -> list[str]:
    """`command` run with HPC-X loaded (`source hpcx-init.sh; hpcx_load`) on the node that runs it."""
    return ["/bin/bash", "-c", _TASK_SCRIPT, "ndfleet-hpcx", pattern, *command]
