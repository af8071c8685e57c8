#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the SLURM tests (tests/test_slurm.py) and for
# trying the SLURM profile before a real cluster: Debian's slurm-wlm and munge, a slurm.conf
# naming this host as controller and only compute node, no accounting database. Needs root.
#   tests/slurm/up.sh      # installs the packages if missing, (re)starts munged, slurmctld, slurmd
#   tests/slurm/down.sh    # stops them
# Snakemake then submits with: --executor slurm --slurm-status-command squeue --slurm-no-account
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "tests/slurm/up.sh: needs root (apt-get, daemons)" >&2; exit 2; }
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))  # leave 1 GiB to the system
conf_dir=/etc/slurm
mkdir -p "$conf_dir" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat > "$conf_dir/slurm.conf" <<CONF
# written by synthaudit's tests/slurm/up.sh: one node, controller and compute on $host
ClusterName=synthaudit-test
SlurmctldHost=$host
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
rm -f "$conf_dir/cgroup.conf"  # no cgroup plugin: slurm-wlm 22.05 has no "disabled" one; linuxproc tracks jobs
# munge: a key once, then the daemon (as root: --force)
[ -s /etc/munge/munge.key ] || { mungekey --create --force 2>/dev/null || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
chmod 400 /etc/munge/munge.key
pkill -x slurmd 2>/dev/null || true
pkill -x slurmctld 2>/dev/null || true
pkill -x munged 2>/dev/null || true
sleep 1
munged --force
slurmctld -c   # -c: a clean state (no jobs left from an earlier run)
slurmd
for _ in $(seq 30); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    sinfo
    exit 0
  fi
  sleep 1
done
echo "tests/slurm/up.sh: the node did not become idle:" >&2
sinfo >&2 || true
tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
