#!/bin/bash
# Fake HPC-X hpcx-init.sh, laid out as on the Azure HPC image (/opt/hpcx-<version>/hpcx-init.sh, reached on the image
# through `module load mpi/hpcx`; Azure/azhpc-images components/install_mpis.sh at commit 8e9d055fb9e1): defines
# hpcx_load, which, as HPC-X's own does, puts HPC-X's Open MPI on PATH (ompi/bin: mpirun, here the fake fleet's) and
# its libraries on LD_LIBRARY_PATH (ompi/lib, which holds libmpi.so.40: the fakes of all_reduce_perf and
# nvbandwidth start only when a folder on LD_LIBRARY_PATH has it, tests/fakes/lib/common.sh). The contract this
# stands in for: ndfleet/images/ubuntu-hpc-2204.json, environments.hpcx (docs/images.md).
# NDFLEET_FAKE_HPCX_LOG, when set, gets one line per hpcx_load (which host loaded it, when the fake srun says).
HPCX_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

hpcx_load() {
    export HPCX_DIR
    export HPCX_MPI_DIR="$HPCX_DIR/ompi"
    export OPAL_PREFIX="$HPCX_MPI_DIR"
    export PATH="$HPCX_MPI_DIR/bin:$PATH"
    export LD_LIBRARY_PATH="$HPCX_MPI_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if [ -n "${NDFLEET_FAKE_HPCX_LOG:-}" ]; then
        echo "loaded ${NDFLEET_FAKE_HOSTS:-here}" >> "$NDFLEET_FAKE_HPCX_LOG"
    fi
}
