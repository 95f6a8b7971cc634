#!/bin/sh
# Twin hardware stand-in, run at every boot of a twin compute node (twin-hw-boot.service, before sysinit.target):
# what the hardware and a VM's kernel give a node at boot.
hw=/opt/twin-hw/root
# A fresh fake /proc/mounts: mounts are gone after a reboot.
cp "$hw/proc/mounts.boot" "$hw/proc/mounts"
# The GPU driver's device files (Slurm's gres.conf names them).
for i in 0 1 2 3 4 5 6 7; do
  [ -e "/dev/nvidia$i" ] || mknod -m 0666 "/dev/nvidia$i" c 195 "$i"
done
# A VM's systemd owns its whole cgroup tree; systemd-nspawn mounts the v1 controllers read-only. Mount them again,
# writable, inside this machine's own cgroup namespace.
mount -o remount,rw /sys/fs/cgroup
controllers=$(awk '$3 == "cgroup" {print $4}' /proc/self/mounts | tr ',' '\n' |
  grep -vxE 'rw|ro|nosuid|nodev|noexec|relatime|name=.*' | sort -u)
for c in $controllers; do
  umount -l "/sys/fs/cgroup/$c" 2>/dev/null
  mkdir -p "/sys/fs/cgroup/$c"
  mount -t cgroup -o "rw,nosuid,nodev,noexec,$c" cgroup "/sys/fs/cgroup/$c"
done
exit 0
