#!/usr/bin/env bash
# A throwaway single-node Slurm cluster on 127.0.0.1 for the Slurm executor's tests.
#
#   eval "$(bash .ci/slurm.sh)"                    # start one; exports SLURM_CONF (and LEDGER_TEST_SLURM_DIR)
#   bash .ci/slurm.sh --stop "$LEDGER_TEST_SLURM_DIR"   # stop it and remove its files
#
# Installs Debian's slurmctld, slurmd, slurm-client and munge first where sbatch is missing (as root, which
# CI is). munged runs with the package's key; slurmctld and slurmd run as root from a fresh temporary folder
# with a config of their own (this machine's CPUs, free ports, requeue allowed, no accounting database), so
# nothing of a real cluster is touched. On stdout only `export NAME=value` lines, so `eval` takes them.
set -euo pipefail

log() { echo "slurm.sh: $*" >&2; }

if [[ "${1:-}" == "--stop" ]]; then
    dir=${2:?usage: slurm.sh --stop DIR}
    for pid_file in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
        [[ -f "$pid_file" ]] && kill "$(cat "$pid_file")" 2>/dev/null || true
    done
    sleep 1
    rm -rf "$dir"
    exit 0
fi

if ! command -v sbatch >/dev/null || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    if [[ $(id -u) -ne 0 ]]; then
        log "no Slurm here: install slurmctld, slurmd, slurm-client and munge, or run this as root"
        exit 1
    fi
    log "installing slurmctld, slurmd, slurm-client and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >&2
fi

# munge: the package's key; one daemon for the machine (started once, left running like the package would)
if ! munge -n </dev/null >/dev/null 2>&1; then
    [[ -f /etc/munge/munge.key ]] || runuser -u munge -- /usr/sbin/mungekey --create >&2
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged >&2
    for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
fi

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

dir=$(mktemp -d /tmp/ledger-slurm.XXXXXX)
chmod 755 "$dir"
mkdir -p "$dir/state" "$dir/spool"
host=$(hostname -s)
cpus=$(nproc)
memory=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
cat >"$dir/slurm.conf" <<EOF
ClusterName=ledgerci
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobRequeue=1
ReturnToService=2
MinJobAge=3600
KillWait=5
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
/usr/sbin/slurmctld -f "$dir/slurm.conf" >&2
/usr/sbin/slurmd -f "$dir/slurm.conf" >&2
for _ in $(seq 100); do
    if SLURM_CONF="$dir/slurm.conf" sinfo -h -o "%T" 2>/dev/null | grep -qE "^(idle|mixed|allocated)"; then
        log "Slurm $(SLURM_CONF="$dir/slurm.conf" sinfo --version | cut -d" " -f2) on 127.0.0.1: node $host ($cpus CPUs), partition ci, in $dir"
        echo "export SLURM_CONF=$dir/slurm.conf"
        echo "export LEDGER_TEST_SLURM_DIR=$dir"
        exit 0
    fi
    sleep 0.2
done
log "the node did not come up; its logs: $dir/slurmctld.log, $dir/slurmd.log"
tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
exit 1
