#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, from Debian's packages, for `make test-slurm`.
#
#   sudo scripts/slurm-local.sh        # then: sinfo, sbatch, squeue, sacct, scancel
#
# Installs what is missing (slurm-wlm, slurmdbd, munge, mariadb-server), writes
# /etc/slurm/slurm.conf for one node (this host, with the CPUs and memory `slurmd -C` detects) in
# one partition (SLURM_LOCAL_PARTITION, default `local`), and starts munged, MariaDB, slurmdbd,
# slurmctld and slurmd as plain daemons (no systemd needed). Accounting (slurmdbd on MariaDB) is
# there because submitit asks `sacct` for job states: without it a cancelled or failed array
# task is never seen to end and the submitting command waits forever.
#
# Safe to run again: it rewrites the configuration only when it would change, restarts a daemon
# only when it is dead or its configuration changed, and waits until `sinfo` shows the node up.
# No cgroups (containers often lack them): proctrack/linuxproc, task/none. State lives under
# /var/spool/slurm*, logs under /var/log/slurm. Debian/Ubuntu, as root.
set -euo pipefail

PARTITION=${SLURM_LOCAL_PARTITION:-local}
CLUSTER=${SLURM_LOCAL_CLUSTER:-local}
CONF_DIR=/etc/slurm
LOG_DIR=/var/log/slurm
WAIT_S=${SLURM_LOCAL_WAIT_S:-90}

say() { echo "slurm-local: $*" >&2; }
die() { say "error: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and starts daemons)"

# --- packages ------------------------------------------------------------------------------------
export PATH=$PATH:/usr/sbin:/sbin
need=()
for cmd_pkg in slurmctld:slurm-wlm slurmd:slurm-wlm sbatch:slurm-wlm slurmdbd:slurmdbd \
               munged:munge mariadbd:mariadb-server; do
    command -v "${cmd_pkg%%:*}" >/dev/null 2>&1 || need+=("${cmd_pkg#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
    mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
    say "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# --- this node -----------------------------------------------------------------------------------
NODE=$(hostname -s 2>/dev/null || uname -n | cut -d. -f1)
# `slurmd -C` prints e.g. "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2
# ThreadsPerCore=1 RealMemory=24105": keep the hardware part, name and address are ours.
HW=$(slurmd -C 2>/dev/null | head -n1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore|RealMemory)=' | tr '\n' ' ')
[[ $HW == *CPUs=* && $HW == *RealMemory=* ]] || die "slurmd -C did not report this node's hardware"
CPUS=$(sed -E 's/.*CPUs=([0-9]+).*/\1/' <<<"$HW")
MEM=$(sed -E 's/.*RealMemory=([0-9]+).*/\1/' <<<"$HW")

# --- configuration -------------------------------------------------------------------------------
install -d -m 0755 "$CONF_DIR"
install -d -o slurm -g slurm -m 0755 "$LOG_DIR" /var/spool/slurmctld
install -d -o root -g root -m 0755 /var/spool/slurmd
changed=0

# put FILE MODE OWNER: install stdin as FILE when its content differs; remember that it changed.
put() {
    local file=$1 mode=$2 owner=$3 tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if [ -f "$file" ] && cmp -s "$tmp" "$file"; then
        rm -f "$tmp"
    else
        install -m "$mode" -o "${owner%:*}" -g "${owner#*:}" "$tmp" "$file"
        rm -f "$tmp"
        changed=1
    fi
}

put "$CONF_DIR/slurm.conf" 0644 root:root <<EOF
# Written by scripts/slurm-local.sh: one node ($NODE), one partition ($PARTITION).
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
InactiveLimit=0
KillWait=10
MinJobAge=300
SlurmdTimeout=300
NodeName=$NODE NodeAddr=127.0.0.1 ${HW}State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

put "$CONF_DIR/slurmdbd.conf" 0600 slurm:slurm <<EOF
# Written by scripts/slurm-local.sh: accounting in the local MariaDB (unix-socket login as slurm).
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
LogFile=$LOG_DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StorageLoc=slurm_acct_db
EOF

# --- daemons -------------------------------------------------------------------------------------
started=()

# alive PIDFILE NAME: the process in PIDFILE is running and is NAME.
alive() {
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

# stop PIDFILE NAME: end that one process (by its pid) and wait for it.
stop() {
    alive "$1" "$2" || return 0
    local pid
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do alive "$1" "$2" || return 0; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
}

# wait_for SECONDS CMD...: until CMD succeeds.
wait_for() {
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.5
    done
}

# munge: one key, shared by every daemon and client on this node.
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
if ! alive /run/munge/munged.pid munged; then
    runuser -u munge -- munged
    started+=(munged)
fi
wait_for 20 sh -c 'munge -n | unmunge' || die "munged does not answer (see /var/log/munge/munged.log)"

# MariaDB for slurmdbd: its own init script starts it without systemd and waits for the socket.
if ! mysqladmin ping >/dev/null 2>&1; then
    /etc/init.d/mariadb start >/dev/null
    started+=(mariadb)
fi
wait_for 30 mysqladmin ping || die "MariaDB does not answer"
mysql -u root <<'EOF'
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED VIA unix_socket;
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF

if [ $changed -eq 1 ]; then  # a new configuration: restart what reads it
    stop /run/slurmd.pid slurmd
    stop /run/slurmctld.pid slurmctld
    stop /run/slurmdbd.pid slurmdbd
fi
if ! alive /run/slurmdbd.pid slurmdbd; then
    slurmdbd
    started+=(slurmdbd)
fi
wait_for 30 sacctmgr -n list cluster || die "slurmdbd does not answer (see $LOG_DIR/slurmdbd.log)"
if ! alive /run/slurmctld.pid slurmctld; then
    slurmctld
    started+=(slurmctld)
fi
wait_for 30 scontrol ping || die "slurmctld does not answer (see $LOG_DIR/slurmctld.log)"
if ! alive /run/slurmd.pid slurmd; then
    slurmd
    started+=(slurmd)
fi

# --- wait for the node ---------------------------------------------------------------------------
node_state() { sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n1; }
node_up() { case $(node_state) in idle|mixed|allocated|completing) return 0;; *) return 1;; esac; }
deadline=$((SECONDS + WAIT_S))
until node_up; do
    case $(node_state) in
        down*|drain*|fail*) scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true;;
    esac
    [ $SECONDS -lt $deadline ] || die "node $NODE is '$(node_state)', not idle, after ${WAIT_S}s (see $LOG_DIR/slurmd.log)"
    sleep 1
done

if [ ${#started[@]} -gt 0 ]; then what="started $(IFS=,; echo "${started[*]}" | sed 's/,/, /g')"
else what="all daemons already running"; fi
[ $changed -eq 0 ] || what="new configuration, $what"
echo "slurm-local: $what; node $NODE ($CPUS CPUs, $MEM MB) $(node_state) in partition $PARTITION"
