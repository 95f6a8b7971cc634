"""NVIDIA HPC-X, as the Azure HPC image ships it: loading it before the tools that need its libraries.

On the Ubuntu HPC image HPC-X is unpacked under `/opt/hpcx-<version>-.../` and reached through the environment
module `mpi/hpcx` (Azure/azhpc-images, `components/install_mpis.sh`); `mpirun` is on PATH and Open MPI's
libraries (`libmpi.so.40`) on LD_LIBRARY_PATH only after that. nccl-tests' `all_reduce_perf` is built against
HPC-X's Open MPI with an rpath of only `$ORIGIN` (`install_nccl.sh`; NVIDIA/nccl-tests `src/Makefile`), so it does
not even start without HPC-X loaded: exit 127, "error while loading shared libraries: libmpi.so.40". The image
contract (ndfleet/images/ubuntu-hpc-2204.json, docs/images.md) lists which tools need it.

The node program does what HPC-X's README gives for a shell without modules: `source hpcx-init.sh; hpcx_load`.
Where hpcx-init.sh is: ONE setting, the node JSON's `burnin.hpcx_init` (`SETTING`), a glob (default `DEFAULT_INIT`);
the last match in sorted order (the newest version) is used; "" means load nothing (the tools as PATH has them).
Its users:

- the validator (`perf.nccl_allreduce`, `perf.nvbandwidth`): the tool runs under `with_hpcx`;
- the burn-in, hostfile mode (`ndfleet-node burnin`, on a compute node): each test's `mpirun` runs under
  `with_hpcx`, so it is HPC-X's mpirun, and `-x LD_LIBRARY_PATH` carries HPC-X's library path to the remote ranks;
- the burn-in, Slurm mode (`burnin-slurm`, on the controller or login node, which have no HPC-X): each Slurm task
  loads it on its own compute node before it execs all_reduce_perf.
"""

from __future__ import annotations

import glob
from collections.abc import Mapping, Sequence
from typing import Any

SETTING = "burnin.hpcx_init"
DEFAULT_INIT = "/opt/hpcx-*/hpcx-init.sh"
WRAPPER_NAME = "ndfleet-hpcx"  # $0 of the wrapper script: how `unwrap` recognises a command run under HPC-X


class HpcxError(Exception):
    pass


def init_pattern(burnin_section: Mapping[str, Any]) -> str:
    """The hpcx-init.sh glob from the node JSON's `burnin` section (DEFAULT_INIT when the key is absent)."""
    value = burnin_section.get("hpcx_init", DEFAULT_INIT)
    return value if isinstance(value, str) else DEFAULT_INIT


def find_init(pattern: str) -> str:
    """The newest hpcx-init.sh matching `pattern` here, or HpcxError naming the setting."""
    matches = sorted(glob.glob(pattern))
    if not matches:
        raise HpcxError(f"cannot find HPC-X: nothing matches {SETTING} = {pattern!r}")
    return matches[-1]


# Loads HPC-X on whichever node runs it, then becomes the command. $1 is the glob (left unquoted in `for` on purpose:
# that expands it; the last match, in sorted order, is the newest version), the rest is the command.
_TASK_SCRIPT = (
    'p=$1; shift; i=; for f in $p; do [ -f "$f" ] && i=$f; done; '
    '[ -n "$i" ] && . "$i" >/dev/null && hpcx_load >/dev/null || { echo "no HPC-X: $p" >&2; exit 127; }; '
    'exec "$@"'
)


def with_hpcx(pattern: str, command: Sequence[str]) -> list[str]:
    """`command` run with HPC-X loaded (`source hpcx-init.sh; hpcx_load`) on the node that runs it."""
    return ["/bin/bash", "-c", _TASK_SCRIPT, WRAPPER_NAME, pattern, *command]


def unwrap(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """(the hpcx-init glob, the command) of an argv made by `with_hpcx`; (None, argv) for any other argv."""
    if len(argv) > 5 and list(argv[:4]) == ["/bin/bash", "-c", _TASK_SCRIPT, WRAPPER_NAME]:
        return argv[4], list(argv[5:])
    return None, list(argv)
