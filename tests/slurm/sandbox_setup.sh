#!/usr/bin/env bash
# Runs as PID 1 of a private user, network, mount, UTS and PID namespace (tests/slurm/sandbox.py starts it).
# Builds a network with no way out: a bridge with no uplink, the controller on it, and one network + UTS
# namespace per compute node (its own host name, its own slurmd port), joined to the bridge by macvlan.
# Usage: sandbox_setup.sh DIR CONTROLLER_ADDR NODE=ADDR...
set -euo pipefail
dir=$1 ctl_addr=$2
shift 2
hostname ctl
ip link set lo up
ip link add ndbr0 type bridge
ip link set ndbr0 up
ip link add ctl0 link ndbr0 type macvlan mode bridge
ip addr add "$ctl_addr/24" dev ctl0
ip link set ctl0 up
# munge's default socket (configless slurmd has no other way to find it before it has its configuration).
mount -t tmpfs tmpfs /run
mkdir -p /run/munge
mount --bind "$dir/munge" /run/munge
printf '127.0.0.1 localhost\n%s ctl\n' "$ctl_addr" > "$dir/hosts"
i=0
: > "$dir/nodes"
for spec in "$@"; do
  name=${spec%%=*} addr=${spec#*=}
  unshare --net --uts sh -c "hostname $name; ip link set lo up; touch $dir/ns-$name; exec sleep infinity" &
  pid=$!
  # Wait until the node's namespaces exist before moving its interface into them (bounded: 10 s).
  for _ in $(seq 100); do [ -e "$dir/ns-$name" ] && break; sleep 0.1; done
  [ -e "$dir/ns-$name" ] || { echo "node $name: namespace not ready" >&2; exit 1; }
  ip link add "mv$i" link ndbr0 type macvlan mode bridge
  ip link set "mv$i" netns "$pid"
  nsenter --target="$pid" --net ip addr add "$addr/24" dev "mv$i"
  nsenter --target="$pid" --net ip link set "mv$i" up
  echo "$addr $name" >> "$dir/hosts"
  echo "$name $pid" >> "$dir/nodes"
  i=$((i + 1))
done
mount --bind "$dir/hosts" /etc/hosts
# Names that are not in the hosts file are unknown at once, as a cloud's DNS answers (NXDOMAIN) for a CLOUD node's
# name: no resolver here, and glibc's "temporary failure" would make slurmctld retry each lookup for 10 s.
sed 's/^hosts:.*/hosts: files/' /etc/nsswitch.conf > "$dir/nsswitch.conf"
mount --bind "$dir/nsswitch.conf" /etc/nsswitch.conf
echo ready > "$dir/sandbox.ready"
# PID 1 reaps every orphan: a zombie left in a job's process group would make slurmstepd wait for it.
exec python3 -c '
import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
'
