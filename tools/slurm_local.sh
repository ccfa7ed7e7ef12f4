#!/bin/sh
# A one-node SLURM cluster on this machine, for `make slurm-check` (docs/cluster.md).
#
# Installs Debian's slurm-wlm and munge, writes a slurm.conf for this one node (its real CPU count
# and memory), and starts munged, slurmctld and slurmd directly (no systemd here). Needs root.
# Idempotent: a second call finds the cluster up and only waits for the node to be idle.
#
# The plugins are the ones that work without cgroups or an accounting database:
#   ProctrackType=proctrack/linuxproc  processes tracked through /proc (no cgroup v2 delegation needed)
#   TaskPlugin=task/none               no CPU binding
#   JobAcctGatherType=jobacct_gather/none
#   SelectType=select/cons_tres        CPUs and memory are consumable, so array tasks share the node
set -eu

# Whatever step fails (a package, munged, a daemon that exits at start, a node that never comes up),
# the daemons' own logs say why: print their ends, so a CI log holds the cause, not just the exit code.
show_logs() {
    rc=$?
    if [ "$rc" != 0 ]; then
        echo "slurm_local.sh: failed (exit $rc); the daemons' logs:" >&2
        for log in /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log /var/log/munge/munged.log; do
            if [ -f "$log" ]; then echo "--- $log (last 40 lines)" >&2; tail -n 40 "$log" >&2; fi
        done
    fi
}
trap show_logs EXIT

if [ "$(id -u)" != 0 ]; then
    echo "slurm_local.sh: needs root (it installs packages and starts daemons)" >&2
    exit 2
fi

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

node=$(hostname -s)
cpus=$(nproc)
# slurmd refuses a node that reports less memory than configured: leave 5% to the system.
mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.95}' /proc/meminfo)
conf=/etc/slurm/slurm.conf

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat > "$conf.new" <<EOF
# Written by tools/slurm_local.sh: a one-node cluster for tests.
ClusterName=local
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
KillWait=30
MaxArraySize=1001
# without a default, a job that asks no memory holds all of it, and array tasks would run one at a time
DefMemPerCPU=$((mem_mb / cpus))
NodeName=$node CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
changed=1
if [ -f "$conf" ] && cmp -s "$conf" "$conf.new"; then changed=0; fi
mv "$conf.new" "$conf"

if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key

running() { pgrep -x "$1" >/dev/null 2>&1; }

running munged || su -s /bin/sh munge -c /usr/sbin/munged
if [ "$changed" = 1 ] && running slurmctld; then
    scontrol reconfigure
fi
running slurmctld || slurmctld
running slurmd || slurmd

# Wait for the node to accept work (a minute at most).
i=0
until sinfo -h -o %T 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; do
    i=$((i + 1))
    if [ "$i" -gt 60 ]; then
        echo "slurm_local.sh: the node did not come up; see /var/log/slurm/" >&2
        sinfo >&2 || true
        exit 1
    fi
    sleep 1
done
sinfo
