#!/usr/bin/env bash
# Start a single-node Slurm (munge, slurmctld, slurmd) on this machine for the profile's test, with a
# generic `gpu` resource of 2 on the node, in a scratch folder given as $1. Needs root and Debian's
# slurmctld, slurmd, munge and slurm-client packages (.ci/run installs them). tests/slurm/stop.sh $1 ends it.
set -euo pipefail
root=${1:?usage: start.sh SCRATCH_DIR}
rm -rf "$root"
mkdir -p "$root"/{spool/ctld,spool/d,log,munge,run}
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))

# munge: a key of our own, a socket in the scratch folder
dd if=/dev/urandom of="$root/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$root/munge/munge.key"
munged --force --key-file="$root/munge/munge.key" --socket="$root/munge/munge.socket" \
  --pid-file="$root/run/munged.pid" --log-file="$root/log/munged.log" --seed-file="$root/munge/seed"

cat > "$root/slurm.conf" <<CONF
ClusterName=inferbench-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$root/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$root/spool/ctld
SlurmdSpoolDir=$root/spool/d
SlurmctldPidFile=$root/run/slurmctld.pid
SlurmdPidFile=$root/run/slurmd.pid
SlurmctldLogFile=$root/log/slurmctld.log
SlurmdLogFile=$root/log/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
# finished jobs stay visible to squeue/scontrol for 10 minutes: the executor's status checks and the
# test read them there (there is no accounting database)
MinJobAge=600
ReturnToService=2
SchedulerType=sched/backfill
NodeName=$host CPUs=$cpus RealMemory=$mem_mb Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
# two stand-in device files: Slurm's gpu gres counts devices by file; no program opens them
touch "$root/gpu0" "$root/gpu1"
cat > "$root/gres.conf" <<CONF
AutoDetect=off
NodeName=$host Name=gpu File=$root/gpu[0-1]
CONF

# Jobs' own srun calls (the executor's job steps) drop SLURM_* variables, SLURM_CONF included, and
# then read the standard place: link it there, unless a real cluster's config is already there.
if [ -e /etc/slurm/slurm.conf ] && [ "$(readlink /etc/slurm/slurm.conf)" != "$root/slurm.conf" ]; then
  if ! grep -q "^ClusterName=inferbench-test" /etc/slurm/slurm.conf; then
    echo "/etc/slurm/slurm.conf belongs to another Slurm: not starting a test cluster here" >&2
    exit 3
  fi
fi
mkdir -p /etc/slurm
ln -sfn "$root/slurm.conf" /etc/slurm/slurm.conf

export SLURM_CONF="$root/slurm.conf"
slurmctld -c -f "$root/slurm.conf"
slurmd -f "$root/slurm.conf"
for _ in $(seq 50); do
  if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
    echo "slurm up: SLURM_CONF=$root/slurm.conf"
    exit 0
  fi
  sleep 0.2
done
echo "slurm did not come up; logs in $root/log" >&2
sinfo >&2 || true
exit 1
