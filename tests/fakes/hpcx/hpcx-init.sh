#!/bin/bash
# Fake HPC-X hpcx-init.sh, laid out as on the Azure HPC image (/opt/hpcx-<version>/hpcx-init.sh): defines
# hpcx_load, which puts HPC-X's mpirun on PATH (here the fake fleet's) and its libraries on LD_LIBRARY_PATH.
# NDFLEET_FAKE_HPCX_LOG, when set, gets one line per hpcx_load (which host loaded it, when the fake srun says).
HPCX_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

hpcx_load() {
    export HPCX_DIR
    export HPCX_MPI_DIR="$HPCX_DIR/ompi"
    export OPAL_PREFIX="$HPCX_MPI_DIR"
    export PATH="$HPCX_DIR/../fleet/bin:$PATH"
    export LD_LIBRARY_PATH="$HPCX_MPI_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if [ -n "${NDFLEET_FAKE_HPCX_LOG:-}" ]; then
        echo "loaded ${NDFLEET_FAKE_HOSTS:-here}" >> "$NDFLEET_FAKE_HPCX_LOG"
    fi
}
