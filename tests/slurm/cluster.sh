#!/usr/bin/env bash
# A real multi-node Slurm test cluster on one machine (root): every node is a network + UTS namespace with its own
# slurmd, address and hostname; each has 4 fake GPUs (GRES gpu of type ctgpu, backed by /dev/null).
#   cluster.sh install        apt-get the Slurm, slurmdbd, MariaDB and munge packages (idempotent)
#   cluster.sh start [N]      N nodes n1..nN (default $CT_SLURM_NODES or 4); a no-op if already up with N nodes
#   cluster.sh stop           cancel jobs, stop every daemon by its pid file, remove namespaces and /etc/hosts lines
#   cluster.sh status         print sinfo; exit 0 if the cluster is up, else 1
#   cluster.sh env            print `export` lines for tests: eval "$(bash tests/slurm/cluster.sh env)"
# Partitions: `ci` (default, all nodes) and `ci-small` (n1, n2), PriorityTier 1, preemptable (PreemptMode=REQUEUE);
# `ci-high` (all nodes, PriorityTier 2): a job there preempts (requeues) jobs of ci/ci-small on the nodes it needs.
# Requeue: JobRequeue=1. Finished jobs leave `scontrol show job` after MinJobAge (300 s, so the tests that poll
# scontrol see every end state; CT_SLURM_MIN_JOB_AGE=2 gives Slurm's documented minimum) plus up to a minute.
# Accounting as at real sites: slurmdbd on MariaDB (127.0.0.1:3307), AccountingStorageEnforce=associations,limits,qos,
# so a job must name an account and QOS its user may use or none (then the defaults apply); anything else is refused
# at submit. Accounts ci-lab (root's default) and ci-other, QOS normal (the default) and ci-regular; sacct works.
# Every start has a fresh database (job ids start at 1 again): sacct knows only the jobs of this start.
# Node features: all nodes `gpu`, n1 and n2 also `hbm80g` (--constraint=hbm80g); an unknown feature is refused.
# GPUs are typed: --gpus-per-node=1, =ctgpu:1, --gres=gpu:ctgpu:1 run; another type (gpu:a100:1) is refused.
# Bridge ct-br0 10.77.0.1/24, node K at 10.77.0.(10+K).
# All state (config, pid files, logs, spool, munge key and socket, MariaDB datadir) lives in $CT_SLURM_STATE
# (default /run/cluster-train-slurm); /etc/slurm/slurm.conf becomes a symlink to it while the cluster is up.
set -euo pipefail

STATE=${CT_SLURM_STATE:-/run/cluster-train-slurm}
# this script's own sinfo/squeue/scancel talk to this cluster, whatever the caller set
export SLURM_CONF="$STATE/slurm.conf"
BRIDGE=ct-br0
NET=10.77.0
HOSTS_TAG="# cluster-train-slurm"
ETC_CONF=/etc/slurm/slurm.conf
GPUS=4
GPU_TYPE=ctgpu
FEATURE=hbm80g  # n1 and n2 only
QOS=ci-regular
ACCOUNT=ci-lab
OTHER_ACCOUNT=ci-other
DB_PORT=3307    # not MariaDB's 3306: a system MariaDB may be running
TIMEOUT=30

main() {
  case "${1:-}" in
    install) install_packages ;;
    start) start "${2:-${CT_SLURM_NODES:-4}}" ;;
    stop) stop ;;
    status) status ;;
    env) print_env ;;
    *) echo "usage: $0 {install|start [N]|stop|status|env}" >&2; exit 2 ;;
  esac
}

die() { echo "cluster.sh: $*" >&2; exit 1; }
node_ip() { echo "$NET.$((10 + $1))"; }

install_packages() {
  local pkgs=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server iproute2)
  local apt=(apt-get -y -q -o DPkg::Lock::Timeout=120)
  all_installed "${pkgs[@]}" && return 0
  # Update the package lists only when an install from the current ones fails (a fresh machine has none).
  "${apt[@]}" install --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 && return 0
  "${apt[@]}" update >/dev/null
  "${apt[@]}" install --no-install-recommends "${pkgs[@]}" >/dev/null
}

all_installed() {
  local status
  status=$(dpkg-query -W -f '${Status}\n' "$@" 2>/dev/null) || return 1
  ! grep -qv '^install ok installed$' <<<"$status"
}

# --- processes, always by their own pid file -----------------------------------------------------------------------

pid_of() {  # pid from FILE if that process is alive and is still the program NAME (pids get reused)
  local file=$1 name=$2 pid
  pid=$(cat "$file" 2>/dev/null) || return 1
  [ -n "$pid" ] && alive "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] && echo "$pid"
}

alive() {  # a zombie is dead: where init reaps late (or never), a crashed daemon stays one for seconds
  [ -d "/proc/$1" ] && ! grep -qs '^State:[[:space:]]*Z' "/proc/$1/status"
}

kill_pids() {  # TERM them all at once (each daemon takes ~2 s to exit), wait up to 10 s, then KILL what is left
  local pid i left
  [ $# -gt 0 ] || return 0
  kill "$@" 2>/dev/null || true
  for i in $(seq 100); do
    left=()
    for pid in "$@"; do [ ! -d "/proc/$pid" ] || left+=("$pid"); done
    [ ${#left[@]} -gt 0 ] || return 0
    sleep 0.1
  done
  kill -9 "${left[@]}" 2>/dev/null || true
}

nodes() {  # the node names of the cluster that is (or was) set up, from the state dir or the tagged /etc/hosts lines
  if [ -f "$STATE/nodes" ]; then cat "$STATE/nodes"; else awk -v t="$HOSTS_TAG" 'index($0, t) {print $2}' /etc/hosts; fi
}

up() {  # every daemon alive and slurmctld answering
  local n
  [ -f "$STATE/nodes" ] || return 1
  pid_of "$STATE/munge/munged.pid" munged >/dev/null && pid_of "$STATE/slurmctld.pid" slurmctld >/dev/null || return 1
  pid_of "$STATE/mysql/mysqld.pid" mariadbd >/dev/null && pid_of "$STATE/slurmdbd.pid" slurmdbd >/dev/null || return 1
  for n in $(nodes); do pid_of "$STATE/slurmd-$n.pid" slurmd >/dev/null || return 1; done
  sinfo -h >/dev/null 2>&1
}

# --- start ---------------------------------------------------------------------------------------------------------

start() {
  local n=$1
  [[ "$n" =~ ^[1-9][0-9]?$ ]] && [ "$n" -le 50 ] || die "node count must be 1..50, got '$n'"
  [ "$(id -u)" = 0 ] || die "run as root"
  command -v slurmctld >/dev/null || die "Slurm is not installed: run '$0 install'"
  if up; then
    [ "$(nodes | wc -l)" = "$n" ] && return 0
    die "already running with $(nodes | wc -l) nodes; run '$0 stop' first"
  fi
  stop >/dev/null  # whatever a failed or crashed earlier start left behind
  mkdir -p "$STATE"/{log,spool/ctld,dev} && chmod 0755 "$STATE"
  seq 1 "$n" | sed 's/^/n/' >"$STATE/nodes"
  xargs -I{} mkdir -p "$STATE/spool/{}" <"$STATE/nodes"  # slurmd logs an error if its spool dir is missing
  write_config "$n"
  start_munge
  start_accounting
  setup_network "$n"
  slurmctld -c -f "$STATE/slurm.conf"  # -c: no saved state, so no DRAIN reason of an earlier run carries over
  start_slurmds
  wait_idle "$n"
}

write_config() {
  local n=$1 i small=n1 features
  [ "$n" -lt 2 ] || small=n1,n2
  for i in $(seq 0 $((GPUS - 1))); do ln -sfn /dev/null "$STATE/dev/gpu$i"; done  # GRES files: character devices
  {
    echo "ClusterName=ct"
    echo "SlurmctldHost=$(hostname -s)($NET.1)"  # must be this host's short name (else slurmctld refuses to run)
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$STATE/munge/munge.socket"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$STATE/spool/ctld"
    echo "SlurmdSpoolDir=$STATE/spool/%n"
    echo "SlurmctldPidFile=$STATE/slurmctld.pid"
    echo "SlurmdPidFile=$STATE/slurmd-%n.pid"
    echo "SlurmctldLogFile=$STATE/log/slurmctld.log"
    echo "SlurmdLogFile=$STATE/log/slurmd-%n.log"
    # No systemd, no cgroup hierarchy of our own: the plugins that need neither.
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "JobCompType=jobcomp/none"
    echo "AccountingStorageType=accounting_storage/slurmdbd"
    echo "AccountingStorageHost=$(hostname -s)"
    echo "AccountingStoragePass=$STATE/munge/munge.socket"  # slurmdbd connections use this munge socket, not AuthInfo's
    echo "AccountingStorageEnforce=associations,limits,qos"  # unknown account or QOS: refused at submit
    echo "AccountingStorageTRES=gres/gpu"                   # GPU use per job in sacct
    echo "MailProg=/bin/true"
    echo "SchedulerType=sched/backfill"
    # batch_sched_delay=0: else every job waits ~3 s; a pending job (a requeued or preempted one) is looked at every
    # few seconds, not every minute
    echo "SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=5"
    echo "SelectType=select/cons_tres"              # GPUs as TRES (--gpus-per-node) need cons_tres
    echo "SelectTypeParameters=CR_Core"
    # Finished jobs leave `scontrol show job` (sacct keeps them) MinJobAge s after they end, at slurmctld's next purge;
    # the launcher then reads the run's own record
    # (cluster_train/host/runs/segments.py, tested with a scheduler that forgot)
    echo "MinJobAge=${CT_SLURM_MIN_JOB_AGE:-300}"
    echo "JobRequeue=1"                             # batch jobs may be requeued (scontrol requeue, preemption)
    echo "PreemptType=preempt/partition_prio"       # a higher PriorityTier partition preempts a lower one
    echo "PreemptMode=REQUEUE"                      # ... and the preempted job goes back to the queue, same job id
    echo "KillWait=5"
    echo "ReturnToService=2"
    echo "SlurmdParameters=config_overrides"        # advertise 8 CPUs / 16 GB per node on a 2-core machine
    echo "GresTypes=gpu"
    for i in $(seq 1 "$n"); do
      features=gpu
      [ "$i" -gt 2 ] || features=gpu,$FEATURE
      echo "NodeName=n$i NodeHostname=n$i NodeAddr=$(node_ip "$i") CPUs=8 RealMemory=16000" \
        "Gres=gpu:$GPU_TYPE:$GPUS Features=$features State=UNKNOWN"
    done
    # GraceTime: a preempted job gets SIGTERM, and 10 s to act on it before it is killed and requeued.
    echo "PartitionName=ci Nodes=n[1-$n] Default=YES MaxTime=INFINITE State=UP PriorityTier=1" \
        "PreemptMode=REQUEUE GraceTime=10"
    echo "PartitionName=ci-small Nodes=$small MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=10"
    echo "PartitionName=ci-high Nodes=n[1-$n] MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF"
  } >"$STATE/slurm.conf"
  printf 'AutoDetect=off\nNodeName=n[1-%s] Name=gpu Type=%s File=%s/dev/gpu[0-%s]\n' "$n" "$GPU_TYPE" "$STATE" \
    "$((GPUS - 1))" >"$STATE/gres.conf"
  write_db_config
  link_etc_conf
}

write_db_config() {
  local pass
  pass=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  # slurmdbd reads slurmdbd.conf next to $SLURM_CONF and refuses it unless only SlurmUser (root) can read it.
  install -m 0600 /dev/null "$STATE/slurmdbd.conf"
  {
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$STATE/munge/munge.socket"
    echo "DbdHost=$(hostname -s)"                   # must be this host's short name (else slurmdbd refuses to run)
    echo "SlurmUser=root"
    echo "PidFile=$STATE/slurmdbd.pid"
    echo "LogFile=$STATE/log/slurmdbd.log"
    echo "StorageType=accounting_storage/mysql"
    echo "StorageHost=127.0.0.1"
    echo "StoragePort=$DB_PORT"
    echo "StorageUser=slurm"
    echo "StoragePass=$pass"
    echo "StorageLoc=slurm_acct_db"
  } >"$STATE/slurmdbd.conf"
  # MariaDB runs as mysql: its datadir (with socket and pid file) and log are mysql's. It reads only this file, not
  # /etc/mysql; the innodb sizes are the least slurmdbd does not log an error about (1G is only reserved, not used).
  install -d -o mysql -g mysql -m 0755 "$STATE/mysql"
  install -o mysql -g mysql -m 0640 /dev/null "$STATE/log/mariadb.log"
  printf '%s\n' "[mariadbd]" "datadir=$STATE/mysql" "socket=$STATE/mysql/mysqld.sock" \
    "pid-file=$STATE/mysql/mysqld.pid" "log-error=$STATE/log/mariadb.log" "port=$DB_PORT" "bind-address=127.0.0.1" \
    "skip-name-resolve" "skip-log-bin" \
    "innodb_buffer_pool_size=1G" "innodb_log_file_size=64M" "innodb_lock_wait_timeout=900" \
    "innodb_autoextend_increment=8" "innodb_flush_log_at_trx_commit=0" "innodb_doublewrite=0" >"$STATE/mariadb.cnf"
  # slurmdbd's database user (over TCP from 127.0.0.1), created with the system tables by mariadb-install-db
  install -m 0600 /dev/null "$STATE/mariadb-users.sql"
  printf '%s\n' "FLUSH PRIVILEGES;" "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';" \
    "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" >"$STATE/mariadb-users.sql"
}

link_etc_conf() {  # the client commands read /etc/slurm/slurm.conf: point it at ours, keeping any real one aside
  mkdir -p /etc/slurm
  if [ -e "$ETC_CONF" ] && [ ! -L "$ETC_CONF" ] && [ ! -e "$ETC_CONF.ct-saved" ]; then
    mv "$ETC_CONF" "$ETC_CONF.ct-saved"
  fi
  ln -sfn "$STATE/slurm.conf" "$ETC_CONF"
}

start_munge() {
  # munged runs as munge and refuses a key anyone else can read or a directory anyone else can write.
  install -d -o munge -g munge -m 0755 "$STATE/munge"  # 0755: clients must reach the socket
  dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
  chown munge:munge "$STATE/munge/munge.key" && chmod 0600 "$STATE/munge/munge.key"
  runuser -u munge -- munged --key-file="$STATE/munge/munge.key" --socket="$STATE/munge/munge.socket" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/seed"
}

start_accounting() {  # MariaDB, slurmdbd, then the cluster's QOS, accounts and associations, before slurmctld starts
  local user="User - 'root':DefaultAccount='$ACCOUNT':QOS='normal,$QOS':DefaultQOS='normal'"
  run_logged mariadb-install mariadb-install-db --defaults-file="$STATE/mariadb.cnf" --user=mysql --skip-test-db \
    --extra-file="$STATE/mariadb-users.sql"
  setsid -f mariadbd --defaults-file="$STATE/mariadb.cnf" --user=mysql </dev/null >/dev/null 2>&1  # no daemon mode
  # slurmdbd started before the database answers retries only every 5 s
  wait_for MariaDB mariadbd "$STATE/mysql/mysqld.pid" \
    mariadb-admin --no-defaults --socket="$STATE/mysql/mysqld.sock" ping
  slurmdbd
  wait_for slurmdbd slurmdbd "$STATE/slurmdbd.pid" sacctmgr -n show cluster
  # Before slurmctld starts, so it has every association at once. One `load` of a cluster file, not an sacctmgr call
  # per account and user: each call costs ~0.4 s of slurmdbd round trips.
  run_logged sacctmgr sacctmgr -i add qos "$QOS"
  printf '%s\n' "Cluster - 'ct'" "Parent - 'root'" "$user" "Account - '$ACCOUNT'" "Account - '$OTHER_ACCOUNT'" \
    "Parent - '$ACCOUNT'" "$user" "Parent - '$OTHER_ACCOUNT'" "$user" >"$STATE/accounts.cfg"
  run_logged sacctmgr sacctmgr -i load file="$STATE/accounts.cfg"
}

run_logged() {  # run_logged LOG COMMAND...: its output goes to $STATE/log/LOG.log, shown if it fails
  local log="$STATE/log/$1.log"
  shift
  "$@" >>"$log" 2>&1 || { tail -n 20 "$log" >&2; die "failed: $*"; }
}

wait_for() {  # wait_for WHAT NAME PIDFILE COMMAND...: until the daemon NAME of PIDFILE is alive and COMMAND succeeds
  local what=$1 name=$2 pidfile=$3 end=$((SECONDS + TIMEOUT))
  shift 3
  while [ "$SECONDS" -lt "$end" ]; do
    pid_of "$pidfile" "$name" >/dev/null && "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "cluster.sh: $what not up after ${TIMEOUT} s:" >&2
  tail -n 20 "$STATE"/log/*.log >&2 || true
  exit 1
}

setup_network() {
  local n=$1 i ip
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for i in $(seq 1 "$n"); do
    ip="$(node_ip "$i")"
    ip netns add "n$i"
    ip link add "ct-n$i" type veth peer name eth0 netns "n$i"
    ip link set "ct-n$i" master "$BRIDGE" up
    ip -n "n$i" addr add "$ip/24" dev eth0
    ip -n "n$i" link set lo up
    ip -n "n$i" link set eth0 up
    # No default route on purpose: nodes reach only 10.77.0.0/24 (the host's resolver is unreachable anyway), and
    # without one a DNS query fails at once instead of timing out (`getent hosts nK` took 10 s with a route).
    # Each node's hostname must resolve to its own address (gloo binds to what gethostname() resolves to):
    printf '%s n%s %s\n' "$ip" "$i" "$HOSTS_TAG" >>/etc/hosts
  done
}

start_slurmds() {
  local node
  # nsenter, not `ip netns exec`: that remounts /sys, hides /sys/fs/cgroup, and slurmd then dies at start.
  for node in $(nodes); do
    # shellcheck disable=SC2016  # $1 and $2 belong to the inner sh
    nsenter --net="/run/netns/$node" -- unshare --uts -- \
      sh -c 'hostname "$1" && exec slurmd -N "$1" -f "$2"' _ "$node" "$STATE/slurm.conf"
  done
}

wait_idle() {
  local n=$1 i
  for i in $(seq $((TIMEOUT * 5))); do
    [ "$(sinfo -h -N -p ci -o %T 2>/dev/null | grep -cx idle)" = "$n" ] && return 0
    sleep 0.2
  done
  echo "cluster.sh: $n nodes not idle after ${TIMEOUT} s:" >&2
  sinfo -N -p ci >&2 || true
  tail -n 20 "$STATE"/log/*.log "$STATE/munge/munged.log" >&2 || true
  exit 1
}

# --- stop ----------------------------------------------------------------------------------------------------------

stop() {
  local node pids
  cancel_jobs
  mapfile -t pids < <(daemon_pids)
  kill_pids "${pids[@]}"
  for node in $(nodes); do
    # A process still in a node's namespace (a stray slurmstepd or task) is ours.
    mapfile -t pids < <(ip netns pids "$node" 2>/dev/null)
    kill_pids "${pids[@]}"
    ip netns del "$node" 2>/dev/null || true
    ip link del "ct-$node" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  remove_hosts_lines
  unlink_etc_conf
  rm -rf "$STATE"
}

daemon_pids() {
  local node
  for node in $(nodes); do pid_of "$STATE/slurmd-$node.pid" slurmd || true; done
  pid_of "$STATE/slurmctld.pid" slurmctld || true
  pid_of "$STATE/slurmdbd.pid" slurmdbd || true
  pid_of "$STATE/mysql/mysqld.pid" mariadbd || true
  pid_of "$STATE/munge/munged.pid" munged || true
}

cancel_jobs() {  # job steps outlive a killed slurmd (slurmstepd is reparented): end every job while slurmctld is up
  local i
  pid_of "$STATE/slurmctld.pid" slurmctld >/dev/null || return 0
  squeue -h -o %A 2>/dev/null | xargs -r scancel 2>/dev/null || true
  for i in $(seq $((TIMEOUT * 5))); do
    [ -z "$(squeue -h -o %A 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  echo "cluster.sh: jobs still queued after ${TIMEOUT} s; stopping anyway" >&2
}

remove_hosts_lines() {
  grep -qF "$HOSTS_TAG" /etc/hosts || return 0
  local kept
  kept=$(grep -vF "$HOSTS_TAG" /etc/hosts)
  printf '%s\n' "$kept" >/etc/hosts  # rewrite in place: /etc/hosts may be a bind mount that rename cannot replace
}

unlink_etc_conf() {
  [ -L "$ETC_CONF" ] && [ "$(readlink "$ETC_CONF")" = "$STATE/slurm.conf" ] && rm -f "$ETC_CONF"
  if [ -e "$ETC_CONF.ct-saved" ] && [ ! -e "$ETC_CONF" ]; then mv "$ETC_CONF.ct-saved" "$ETC_CONF"; fi
  return 0
}

# --- status, env ---------------------------------------------------------------------------------------------------

status() {
  if up; then sinfo; else echo "cluster.sh: test cluster is not running" >&2; return 1; fi
}

print_env() {
  up || die "test cluster is not running (start it: $0 start)"
  printf 'export %s=%q\n' CT_SLURM_STATE "$STATE" CT_SLURM_NODES "$(nodes | wc -l)" CT_SLURM_PARTITION ci \
    CT_SLURM_SMALL_PARTITION ci-small CT_SLURM_HIGH_PARTITION ci-high CT_SLURM_GPUS_PER_NODE "$GPUS" \
    CT_SLURM_GPU_TYPE "$GPU_TYPE" CT_SLURM_FEATURE "$FEATURE" CT_SLURM_QOS "$QOS" CT_SLURM_ACCOUNT "$ACCOUNT" \
    CT_SLURM_OTHER_ACCOUNT "$OTHER_ACCOUNT" SLURM_CONF "$STATE/slurm.conf"
}

main "$@"
