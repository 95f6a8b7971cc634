#!/usr/bin/env bash
# Build (or reuse) the twin's root file system: one Debian bookworm tree that every twin machine boots under
# systemd-nspawn, plus the .deb files its package-repository stand-ins serve. Runs as root, with access to
# Debian's package mirror (the one this machine's apt uses); the tree is cached outside the checkout.
#
#   tests/twin/build-root.sh [CACHE_DIR]      (default: $NDFLEET_TWIN_CACHE or /var/cache/ndfleet-twin)
#
# What the image holds is what Azure's images hold before cloud-init runs: systemd, cloud-init, python3,
# openssh, curl, Open MPI and node exporter. Slurm, munge, jq and nfs-common are NOT installed: the machines'
# own set-up installs them from the repository stand-ins (Microsoft's Slurm repository and the distribution's
# archive), as on Azure. Prints the root's path on success.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-${NDFLEET_TWIN_CACHE:-/var/cache/ndfleet-twin}}
suite=bookworm
# In the image (what an Azure image has before boot). python3-cffi-backend must be named: without it cloud-init's
# dependencies fail to configure under debootstrap.
image_pkgs=systemd,systemd-sysv,dbus,cloud-init,python3,python3-cffi-backend,openssh-server,openssh-client,iproute2
image_pkgs+=,curl,ca-certificates,gettext-base,locales,procps,openmpi-bin,prometheus-node-exporter,kmod,util-linux,e2fsprogs,less
# Served by the repository stand-ins, with every dependency the image lacks (installed at boot by the set-up).
repo_pkgs=(slurmd slurmctld slurmdbd slurm-client slurm-wlm-basic-plugins libpmix2 libpmix-dev munge jq nfs-common)

stamp=$( (cat "$0"; echo "$image_pkgs ${repo_pkgs[*]}") | sha256sum | cut -c1-16)
root=$cache/root-$stamp
if [ -f "$root/.ndfleet-twin-complete" ]; then
  echo "$root"
  exit 0
fi

# The mirror this machine's apt already uses (first deb URI), unless NDFLEET_TWIN_MIRROR names one.
mirror=${NDFLEET_TWIN_MIRROR:-}
if [ -z "$mirror" ]; then
  # shellcheck disable=SC2016 # $(REPO_URI) is apt's format field, not a shell expansion
  mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Identifier: Packages' 2>/dev/null \
    | grep -v -- '-security' | head -n 1 || true)
fi
if [ -z "$mirror" ]; then
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
fi
[ -n "$mirror" ] || { echo "build-root: no Debian mirror found; set NDFLEET_TWIN_MIRROR" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "build-root: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }

mkdir -p "$cache"
rm -rf "$root.new"
echo "build-root: debootstrap $suite from $mirror into $root (a few minutes)" >&2
debootstrap --variant=minbase --include="$image_pkgs" "$suite" "$root.new" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
  tail -n 40 "$cache/debootstrap.log" >&2
  exit 1
}

# The .deb files of the packages the machines install at boot, with every dependency the image lacks.
cp /etc/resolv.conf "$root.new/etc/resolv.conf"
chroot "$root.new" apt-get update -qq
mkdir -p "$root.new/var/cache/twin-pool/partial"
chroot "$root.new" apt-get install -y -qq --download-only --no-install-recommends \
  -o Dir::Cache::archives=/var/cache/twin-pool "${repo_pkgs[@]}" >/dev/null
rm -rf "$root.new/var/cache/twin-pool/partial" "$root.new/var/cache/twin-pool/lock" "$root.new/var/lib/apt/lists/"*
mkdir -p "$cache/pool-$stamp"
mv "$root.new/var/cache/twin-pool/"*.deb "$cache/pool-$stamp/"
rmdir "$root.new/var/cache/twin-pool"
: >"$root.new/etc/apt/sources.list"
rm -f "$root.new/var/cache/apt/archives/"*.deb

# Image settings an Azure image has in its own way: cloud-init reads only the NoCloud seed the twin writes
# (Azure's image reads the Azure data source), the network comes from systemd-networkd (the twin writes the
# address Azure's DHCP would hand out), no console login prompt.
cat >"$root.new/etc/cloud/cloud.cfg.d/90-twin.cfg" <<'CFG'
datasource_list: [NoCloud, None]
network: {config: disabled}
CFG
chroot "$root.new" systemctl enable systemd-networkd.service >/dev/null 2>&1
chroot "$root.new" systemctl mask console-getty.service getty@tty1.service serial-getty@ttyS0.service \
  systemd-timesyncd.service >/dev/null 2>&1 || true
# Ubuntu's images have en_US.UTF-8 built (cloud-init's locale module sets it); Debian's locale-gen takes no argument.
sed -i 's/^# *\(en_US.UTF-8 UTF-8\)/\1/' "$root.new/etc/locale.gen"
chroot "$root.new" locale-gen >/dev/null
echo 'uninitialized' >"$root.new/etc/machine-id"
rm -f "$root.new/etc/resolv.conf" "$root.new/etc/hostname"

# The hardware stand-in of the Ubuntu HPC image: ndfleet's fake GPU / InfiniBand / storage tools at the image's
# paths, reading a fake /proc and /sys under NDFLEET_SYSROOT (tests/twin/hardware.py writes it per machine).
hw=$root.new/opt/twin-hw
mkdir -p "$hw/fakes"
cp -r "$here/../fakes/bin" "$here/../fakes/lib" "$hw/fakes/"
cp "$here/fakes/all_reduce_perf" "$hw/fakes/bin/all_reduce_perf"
chmod 0755 "$hw/fakes/bin/"*
link() { mkdir -p "$root.new/$(dirname "$2")"; ln -sf "/opt/twin-hw/fakes/bin/$1" "$root.new/$2"; }
link nvidia-smi /usr/bin/nvidia-smi
link ibstat /usr/sbin/ibstat
link lspci /usr/bin/lspci
link dcgmi /usr/bin/dcgmi
link ib_write_bw /usr/bin/ib_write_bw
link nvbandwidth /opt/nvbandwidth/nvbandwidth
link all_reduce_perf /opt/nccl-tests/build/all_reduce_perf
link mdadm /usr/sbin/mdadm
link mkfs.xfs /usr/sbin/mkfs.xfs
link blobfuse2 /usr/bin/blobfuse2
# The fabric manager service of the HPC image (nothing to manage without NVSwitches).
cat >"$root.new/etc/systemd/system/nvidia-fabricmanager.service" <<'UNIT'
[Unit]
Description=NVIDIA fabric manager (twin stand-in)
[Service]
ExecStart=/bin/sleep infinity
UNIT

touch "$root.new/.ndfleet-twin-complete"
rm -rf "$root"
mv "$root.new" "$root"
# Older builds are replaced by this one.
find "$cache" -maxdepth 1 -name 'root-*' ! -name "root-$stamp" -exec rm -rf {} +
find "$cache" -maxdepth 1 -name 'pool-*' ! -name "pool-$stamp" -exec rm -rf {} +
echo "$root"
