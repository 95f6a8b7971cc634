#!/usr/bin/env bash
# Build (or reuse) the twin's images and the .deb files its package-repository stand-ins serve. Runs as root, with
# access to Debian's package mirror (the one this machine's apt uses); everything is cached outside the checkout.
#
#   tests/twin/build-root.sh [CACHE_DIR]      (default: $NDFLEET_TWIN_CACHE or /var/cache/ndfleet-twin)
#
# Two images, from ndfleet's image contracts (ndfleet/images/*.json; tests/twin/image.py):
# - root-<stamp>: the plain image of the controller and login nodes (Canonical's Ubuntu 22.04 on Azure): one Debian
#   trixie tree (Slurm 24.11, the closest Debian has to the 25.11 ndfleet installs) with what such an image has
#   before cloud-init runs: systemd, cloud-init, python3, openssh, sudo, curl. No HPC-X, no PMIx, no GPU tools.
# - hpc-<stamp>: an overlay layer on top of it, the HPC image's additions at the contract's paths (compute nodes).
# Slurm, munge, jq and nfs-common are NOT installed: the machines' own set-up installs them from the repository
# stand-ins (Microsoft's Slurm repository and the distribution's archive), as on Azure. Prints the root's path, then
# the HPC layer's, one a line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${1:-${NDFLEET_TWIN_CACHE:-/var/cache/ndfleet-twin}}
suite=trixie
# In the plain image. python3-cffi-backend must be named: without it cloud-init's dependencies fail to configure
# under debootstrap.
image_pkgs=systemd,systemd-sysv,dbus,cloud-init,python3,python3-cffi-backend,openssh-server,openssh-client,iproute2
image_pkgs+=,curl,ca-certificates,gettext-base,locales,procps,prometheus-node-exporter,kmod,util-linux,e2fsprogs,less
image_pkgs+=,sudo
# Added by the HPC layer: PMIx, which the HPC image installs from Microsoft's repository (contract: libraries,
# held_packages). Debian's libpmix2t64 stands in, at the path Debian's Slurm build loads it from.
hpc_pkgs=(libpmix2t64)
# Served by the repository stand-ins, with every dependency the image lacks (installed at boot by the set-up).
repo_pkgs=(slurmd slurmctld slurmdbd slurm-client slurm-wlm-basic-plugins slurm-wlm-mysql-plugin munge bash-completion jq nfs-common fuse3)

stamp=$( (sed -n '/^# --- base ---/,/^# --- end base ---/p' "$0"; echo "$suite $image_pkgs ${repo_pkgs[*]} ${hpc_pkgs[*]}") \
  | sha256sum | cut -c1-16)
hpc_stamp=$( (echo "$stamp ${hpc_pkgs[*]}"; sed -n '/^# --- hpc ---/,$p' "$0"
  cat "$repo/ndfleet/images/"*.json "$here/image.py" "$here/fakes/all_reduce_perf"
  grep '^  ndfleet:image:' "$here/Pulumi.twin.yaml"  # the version whose contract the layer is built from
  find "$repo/tests/fakes/bin" "$repo/tests/fakes/lib" -type f | sort | xargs cat) | sha256sum | cut -c1-16)
root=$cache/root-$stamp
hpc=$cache/hpc-$hpc_stamp

# The mirror this machine's apt already uses (first deb URI), unless NDFLEET_TWIN_MIRROR names one.
find_mirror() {
  local mirror=${NDFLEET_TWIN_MIRROR:-}
  if [ -z "$mirror" ]; then
    # shellcheck disable=SC2016 # $(REPO_URI) is apt's format field, not a shell expansion
    mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Identifier: Packages' 2>/dev/null \
      | grep -v -- '-security' | head -n 1 || true)
  fi
  if [ -z "$mirror" ]; then
    mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
  fi
  [ -n "$mirror" ] || { echo "build-root: no Debian mirror found; set NDFLEET_TWIN_MIRROR" >&2; exit 2; }
  echo "$mirror"
}

# --- base ---
if [ ! -f "$root/.ndfleet-twin-complete" ]; then
  mirror=$(find_mirror)
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
  rm -rf "$root.new/var/cache/twin-pool/partial" "$root.new/var/cache/twin-pool/lock"
  rm -rf "$cache/pool-$stamp" "$cache/hpcpool-$stamp"
  mkdir -p "$cache/pool-$stamp" "$cache/hpcpool-$stamp"
  mv "$root.new/var/cache/twin-pool/"*.deb "$cache/pool-$stamp/"
  # What the HPC layer installs, with every dependency the plain image lacks, kept so that the layer can be rebuilt
  # without the mirror (it changes with the fakes; the twin itself runs without a network).
  mkdir -p "$root.new/var/cache/twin-pool/partial"
  chroot "$root.new" apt-get install -y -qq --download-only --no-install-recommends \
    -o Dir::Cache::archives=/var/cache/twin-pool "${hpc_pkgs[@]}" >/dev/null
  mv "$root.new/var/cache/twin-pool/"*.deb "$cache/hpcpool-$stamp/"
  rm -rf "$root.new/var/cache/twin-pool" "$root.new/var/lib/apt/lists/"*
  : >"$root.new/etc/apt/sources.list"
  rm -f "$root.new/etc/apt/sources.list.d/"* "$root.new/var/cache/apt/archives/"*.deb

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
  touch "$root.new/.ndfleet-twin-complete"
  rm -rf "$root"
  mv "$root.new" "$root"
fi
# --- end base ---

# --- hpc ---
# The HPC image's layer: PMIx installed with dpkg into an overlay of the root (so only what it adds lands in the
# layer, held as the image holds it), then the contract's files (tests/twin/image.py). Needs no network.
if [ ! -f "$hpc/.ndfleet-twin-complete" ]; then
  rm -rf "$hpc.new" "$cache/hpc-work" "$cache/hpc-mnt"
  mkdir -p "$hpc.new" "$cache/hpc-work" "$cache/hpc-mnt"
  mount -t overlay overlay -o "lowerdir=$root,upperdir=$hpc.new,workdir=$cache/hpc-work" "$cache/hpc-mnt"
  trap 'umount "$cache/hpc-mnt" 2>/dev/null || true' EXIT
  mkdir -p "$cache/hpc-mnt/var/cache/twin-hpc"
  cp "$cache/hpcpool-$stamp/"*.deb "$cache/hpc-mnt/var/cache/twin-hpc/"
  chroot "$cache/hpc-mnt" sh -c 'dpkg -i /var/cache/twin-hpc/*.deb' >/dev/null
  chroot "$cache/hpc-mnt" apt-mark hold "${hpc_pkgs[@]}" >/dev/null
  rm -rf "$cache/hpc-mnt/var/cache/twin-hpc" "$cache/hpc-mnt/var/cache/apt/"*.bin
  umount "$cache/hpc-mnt"
  trap - EXIT
  rm -rf "$cache/hpc-work" "$cache/hpc-mnt"
  (cd "$repo" && python3 -m tests.twin.image hpc-layer "$hpc.new")
  touch "$hpc.new/.ndfleet-twin-complete"
  rm -rf "$hpc"
  mv "$hpc.new" "$hpc"
fi
# Older builds are replaced by this one.
find "$cache" -maxdepth 1 -name 'root-*' ! -name "root-$stamp" -exec rm -rf {} +
find "$cache" -maxdepth 1 -name 'pool-*' ! -name "pool-$stamp" -exec rm -rf {} +
find "$cache" -maxdepth 1 -name 'hpcpool-*' ! -name "hpcpool-$stamp" -exec rm -rf {} +
find "$cache" -maxdepth 1 -name 'hpc-*' ! -name "hpc-$hpc_stamp" -exec rm -rf {} +
echo "$root"
echo "$hpc"
