#!/usr/bin/env bash
# End what tests/slurm/start.sh started in the scratch folder $1.
root=${1:?usage: stop.sh SCRATCH_DIR}
for pidfile in slurmd slurmctld munged; do
  [ -f "$root/run/$pidfile.pid" ] && kill "$(cat "$root/run/$pidfile.pid")" 2>/dev/null
done
if [ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" = "$root/slurm.conf" ]; then
  rm -f /etc/slurm/slurm.conf
fi
exit 0
