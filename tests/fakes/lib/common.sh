# shellcheck shell=bash
# Shared by the fake node tools: the node they pretend to be and the faults they can inject.
# NDFLEET_FAKE_FAULTS is a comma-separated list of fault names (see tests/fakes/node.py: FAULTS).

# out <<EOF: print a here-document without starting cat.
out() {
  local text
  IFS= read -r -d '' text || true
  printf '%s' "$text"
}

fault() {
  [[ ",${NDFLEET_FAKE_FAULTS:-}," == *",$1,"* ]]
}

# 8 x H100 SXM on an Azure ND H100 v5: nvidia-smi bus ids; the HCAs mlx5_ib0..7 sit at 0101..0108:00:00.0.
GPU_BUSES=(00000001:00:00.0 00000002:00:00.0 00000003:00:00.0 00000008:00:00.0
  00000009:00:00.0 0000000A:00:00.0 0000000B:00:00.0 0000000C:00:00.0)
if fault gpu_missing; then
  # GPU 3 fell off the bus: the driver does not list it any more.
  GPU_BUSES=(00000001:00:00.0 00000002:00:00.0 00000003:00:00.0
    00000009:00:00.0 0000000A:00:00.0 0000000B:00:00.0 0000000C:00:00.0)
fi
GPU_MODEL="${NDFLEET_FAKE_GPU_MODEL:-NVIDIA H100 80GB HBM3}"
HCA_BDFS=(0101:00:00.0 0102:00:00.0 0103:00:00.0 0104:00:00.0 0105:00:00.0 0106:00:00.0 0107:00:00.0 0108:00:00.0)
export GPU_BUSES GPU_MODEL HCA_BDFS

# The kernel log of this boot, as journalctl -k prints it (dmesg adds its own prefix).
kernel_lines() {
  out <<'LOG'
kernel: Linux version 5.15.0-1068-azure (buildd@lcy02-amd64-052) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0) #77-Ubuntu SMP
kernel: hv_vmbus: registering driver hv_pci
kernel: mlx5_core 0101:00:00.0: firmware version: 28.39.2048
kernel: mlx5_core 0101:00:00.0: 252.056 Gb/s available PCIe bandwidth (16.0 GT/s PCIe x16 link)
kernel: nvidia-nvlink: Nvlink Core is being initialized, major device number 234
kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024
kernel: nvidia-fs: Initializing nvidia-fs for 5.15.0-1068-azure
kernel: NVRM: Xid (PCI:0002:00:00): 13, pid=41234, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address
LOG
  if fault xid79; then
    echo "kernel: NVRM: Xid (PCI:0008:00:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
  fi
  # Error containment's DRAM Xids as the driver words them (NVIDIA open-gpu-kernel-modules, gpu/error_cont.c:
  # "%s: %s (0x%x,0x%x). physAddr: 0x%08llx RST: %s, D-RST: %s", Contained or Uncontained, then the error id).
  if fault xid94; then
    echo "kernel: NVRM: Xid (PCI:0009:00:00): 94, pid=41234, name=python, Contained: FB DED (0x2,0x1). physAddr: 0x11c4e0000 RST: No, D-RST: No"
  fi
  if fault xid95; then
    echo "kernel: NVRM: Xid (PCI:000A:00:00): 95, pid='<unknown>', name=<unknown>, Uncontained: FB DED (0x1,0x0). physAddr: 0x2a7f3c000 RST: Yes, D-RST: No"
  fi
  if fault ib_flap; then
    for _ in 1 2 3 4 5 6 7 8; do
      echo "kernel: mlx5_core 0104:00:00.0 ib3: lost carrier"
      echo "kernel: mlx5_core 0104:00:00.0 ib3: carrier on"
    done
  fi
}

# Set-up fakes keep the node's state under the sysroot: what survives a reboot in var/fake (the NVMe disks'
# RAID superblock and file system), what does not in dev/md, run and proc (rebuilt by tests/fakes/node.py).
SR="${NDFLEET_SYSROOT:-}"
FAKE_STATE="$SR/var/fake"

# called ARGS...: log this call (tests assert what set-up did, and that a second boot redid nothing).
called() {
  mkdir -p "$FAKE_STATE"
  printf "%s %s\n" "${0##*/}" "$*" >>"$FAKE_STATE/calls.log"
}

# mounted SOURCE MOUNTPOINT TYPE OPTIONS: add a line to the fake /proc/mounts.
mounted() {
  printf '%s %s %s %s 0 0\n' "$1" "$2" "$3" "$4" >>"$SR/proc/mounts"
}

# flaky NAME: true while the fault NAME still fails (the first two calls), false from the third on.
flaky() {
  local n=0 f="$FAKE_STATE/flaky.$1"
  [[ -r $f ]] && n=$(<"$f")
  echo $((n + 1)) >"$f"
  ((n < 2))
}

# needs_libmpi: exit as the dynamic loader does when HPC-X is not loaded. all_reduce_perf (and nvbandwidth) on the
# Azure HPC image are linked against HPC-X's Open MPI (-lmpi) with an rpath of only $ORIGIN:$ORIGIN/verifiable, and
# no ld.so.conf entry names HPC-X: they start only with HPC-X's lib dirs on LD_LIBRARY_PATH (`hpcx_load`).
# Sources: Azure/azhpc-images components/install_nccl.sh, install_nvbandwidth_tool.sh (commit 8e9d055fb9e1);
# NVIDIA/nccl-tests src/Makefile (commit a0b82b2260cf); ndfleet/images/ubuntu-hpc-2204.json, docs/images.md.
# A folder counts when it holds libmpi.so.40 (the fake HPC-X tree has one: tests/fakes/hpcx/ompi/lib).
needs_libmpi() {
  local d
  local IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do
    [[ -n $d && -e $d/libmpi.so.40 ]] && return 0
  done
  echo "${0##*/}: error while loading shared libraries: libmpi.so.40: cannot open shared object file: No such file or directory" >&2
  exit 127
}
