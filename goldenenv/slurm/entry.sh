#!/bin/bash
# goldenenv-slurm: the scheduler daemons of a goldenenv cluster, started in its golden container (as root).
#   goldenenv-slurm head [--db-host HOST | --db-dir DIR]   munged, the accounting (slurmdbd, on the MariaDB at HOST
#                                                          or one it runs itself on DIR), then slurmctld in the
#                                                          foreground
#   goldenenv-slurm db [--datadir DIR]                     MariaDB for the head's slurmdbd, in the foreground (the
#                                                          local stack's database container)
#   goldenenv-slurm export-accounting FILE                 the accounting database, dumped and gzipped to FILE
#   goldenenv-slurm node --conf-server HOST [--gpus N [--gres NAME --gres-devices PREFIX]] [--feature F]...
#                        [--spot aws|alicloud] [--health K=V,...]
#                                                          munged, then a dynamic slurmd (configless, -Z); --health
#                                                          is what the node should have, for its health check;
#                                                          the N devices are GRES NAME (gpu), files PREFIX<n>
#                                                          (/dev/nvidia<n>; an Ascend node: npu, /dev/davinci<n>)
# The stack's munge key is mounted read-only at /run/goldenenv-secrets/munge.key; munged reads a copy it owns
# (0400) outside /etc/munge, so no key is ever part of the image. On the head, slurm.conf is the one goldenenv
# rendered (/etc/goldenenv/slurm/slurm.conf); nodes fetch it from the head.
# The munge key is fixed for a cluster's life: a key rotated on the head reaches a node when its container restarts.
set -euo pipefail
key_source=/run/goldenenv-secrets/munge.key
key=/run/munge-key/munge.key
conf=/etc/goldenenv/slurm/slurm.conf
# Slurm's gpu plugin drops GPUs that gres.conf gives no File= (slurmd: "Removing file-less GPU"): a node would
# register 0 GPUs against its Gres=gpu:N and be drained. Configless nodes get gres.conf from the head; it includes
# this file, which each node writes with the GPU devices its container has (the head's is empty).
gres_devices=/etc/slurm/gres.devices.conf
log() { echo "goldenenv-slurm: $*" >&2; }
# Slurm's accounting: slurmdbd keeps every job, user, association and limit in MariaDB (database slurm_acct_db,
# user slurm). The database password is derived from the stack's munge key, which the cloud's secret store holds,
# so it is never in user data, state or a log, and a replaced head derives the same one.
db_name=slurm_acct_db
db_run=/run/goldenenv-db
db_client=$db_run/client.cnf
dbd_conf=/etc/slurm/slurmdbd.conf
team_tool=/usr/local/bin/goldenenv-team
# the image's own user (images/dockerfile.py UID): jobs submitted without a member's name run as it
operator=$(getent passwd 1000 | cut -d: -f1 || true)

wait_munge_key() {
  local waited=0
  until [ -s "$key_source" ]; do
    if [ $waited -ge 120 ]; then log "no munge key at $key_source after ${waited}s"; exit 1; fi
    sleep 1; waited=$((waited + 1))
  done
}

start_munge() {
  wait_munge_key
  install -d -o munge -g munge -m 0700 /run/munge-key /var/lib/munge /var/log/munge
  install -d -o munge -g munge -m 0755 /run/munge
  install -o munge -g munge -m 0400 "$key_source" "$key"
  runuser -u munge -- /usr/sbin/munged --key-file="$key" --force
}

db_password() {
  # 48 hex digits of SHA-256 over the munge key and this purpose: the same key, the same password
  { cat "$key_source"; printf '\ngoldenenv slurmdbd accounting database\n'; } | sha256sum | cut -c1-48
}

start_mariadb() {
  # MariaDB on DIR (made on first start), listening on BIND; the slurm user may reach slurm_acct_db from anywhere
  # on the cluster's network with the derived password (SQL on stdin: never a command line)
  local dir=$1 bind=$2 waited=0
  install -d -o mysql -g mysql -m 0750 "$dir"
  install -d -o mysql -g mysql -m 0755 /run/mysqld
  if [ ! -d "$dir/mysql" ]; then
    log "a new accounting database in $dir"
    mariadb-install-db --user=mysql --datadir="$dir" --auth-root-authentication-method=socket \
      --skip-test-db > /dev/null
  fi
  # the InnoDB settings slurmdbd checks at start: Slurm's accounting guide (slurm.schedmd.com/accounting.html, "MySQL Configuration")
  mariadbd --user=mysql --datadir="$dir" --bind-address="$bind" --socket=/run/mysqld/mysqld.sock \
    --skip-name-resolve --innodb-buffer-pool-size=128M --innodb-log-file-size=64M \
    --innodb-lock-wait-timeout=900 &
  mariadb_pid=$!
  until mariadb-admin --socket=/run/mysqld/mysqld.sock ping > /dev/null 2>&1; do
    if ! kill -0 "$mariadb_pid" 2> /dev/null || [ $waited -ge 120 ]; then
      log "MariaDB did not start on $dir"; exit 1
    fi
    sleep 1; waited=$((waited + 1))
  done
  mariadb --socket=/run/mysqld/mysqld.sock -u root <<SQL
CREATE DATABASE IF NOT EXISTS $db_name;
CREATE USER IF NOT EXISTS 'slurm'@'%' IDENTIFIED BY '$(db_password)';
ALTER USER 'slurm'@'%' IDENTIFIED BY '$(db_password)';
GRANT ALL ON $db_name.* TO 'slurm'@'%';
SQL
  log "MariaDB $(mariadbd --version | awk '{print $3}') on $dir, listening on $bind"
}

db_client_conf() {
  # the slurm user's client settings for mariadb and mariadb-dump: a file only root reads, never a command line
  install -d -m 0700 "$db_run"
  (umask 077; printf '[client]\nuser=slurm\npassword=%s\nhost=%s\nport=3306\n' "$(db_password)" "$1" \
    > "$db_client")
}

wait_db() {
  local waited=0
  until mariadb --defaults-extra-file="$db_client" -e 'SELECT 1' "$db_name" > /dev/null 2>&1; do
    if [ $waited -ge 180 ]; then log "the accounting database is not reachable after ${waited}s"; exit 1; fi
    sleep 1; waited=$((waited + 1))
  done
}

restore_accounting() {
  # an empty database and an export on the shared file system (a destroy's): the cluster's history comes back
  local dump=${GOLDENENV_JOBS:-}/.goldenenv/accounting.sql.gz tables
  [ -n "${GOLDENENV_JOBS:-}" ] && [ -s "$dump" ] || return 0
  tables=$(mariadb --defaults-extra-file="$db_client" -N -e \
    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='$db_name'")
  if [ "$tables" = 0 ]; then
    log "restoring the accounting history from $dump"
    gunzip -c "$dump" | mariadb --defaults-extra-file="$db_client" "$db_name"
  fi
}

start_slurmdbd() {
  local host=$1 waited=0
  install -d /etc/slurm
  (umask 077; cat > "$dbd_conf" <<CONF
# slurmdbd.conf, written by goldenenv-slurm at start: the password is derived from the munge key, never stored
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=$host
StoragePort=3306
StorageUser=slurm
StoragePass=$(db_password)
StorageLoc=$db_name
CONF
  )
  chown slurm:slurm "$dbd_conf"
  # supervised: slurmdbd stops when its database goes away for long; slurmctld keeps what it could not send
  # meanwhile (in its state folder) and sends it when slurmdbd is back
  ( while true; do slurmdbd -D; log "slurmdbd exited ($?): starting it again in 3 s"; sleep 3; done ) &
  until sacctmgr -n show cluster > /dev/null 2>&1; do
    if [ $waited -ge 120 ]; then log "slurmdbd did not answer within ${waited}s"; exit 1; fi
    sleep 1; waited=$((waited + 1))
  done
  # the cluster in the database before slurmctld starts: slurmctld registers with slurmdbd at start, and only a
  # registered controller hears of new associations and limits
  local cluster
  cluster=$(sed -n 's/^ClusterName=//p' "$conf")
  if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$cluster"; then
    sacctmgr -i add cluster "$cluster" > /dev/null
  fi
  # and the team's account with the image's user in it, which slurmctld then loads as it starts: jobs can run at once
  "$team_tool" bare --operator "${operator:-}" || log "the image's user has no association yet"
  log "slurmdbd $(slurmdbd -V) on the database at $host"
}

start_team() {
  # the team's members as Unix users (and, on the head, Slurm associations and limits), from the team file on the
  # shared file system, applied again whenever `goldenenv team` changes it
  local role=$1
  if [ -x "$team_tool" ] && [ -n "${GOLDENENV_JOBS:-}" ]; then
    "$team_tool" watch --role "$role" --file "$GOLDENENV_JOBS/.goldenenv/team.tsv" --operator "${operator:-}" &
  fi
}

role=${1:-}
shift || true
case "$role" in
  db)
    datadir=/var/lib/mysql
    while [ $# -gt 0 ]; do
      case "$1" in
        --datadir) datadir=$2; shift 2 ;;
        *) log "unknown argument $1"; exit 2 ;;
      esac
    done
    wait_munge_key
    start_mariadb "$datadir" 0.0.0.0
    trap 'kill -TERM "$mariadb_pid"; wait "$mariadb_pid"' TERM INT
    wait "$mariadb_pid"
    ;;
  export-accounting)
    out=${1:-}
    [ -n "$out" ] || { log "usage: goldenenv-slurm export-accounting FILE"; exit 2; }
    [ -r "$db_client" ] || { log "this head keeps no accounting database"; exit 1; }
    install -d "$(dirname "$out")"
    mariadb-dump --defaults-extra-file="$db_client" --single-transaction --routines "$db_name" | gzip > "$out.part"
    mv -f "$out.part" "$out"
    if [ -s "$db_run/datadir" ]; then
      # a destroy's export: the database's own folder may be copied on with the shared file system while MariaDB
      # runs, so the next head starts from this dump rather than from that copy
      printf '%s\n' "$out" > "$(cat "$db_run/datadir")/goldenenv-exported-to"
    fi
    log "the accounting history is in $out ($(stat -c %s "$out") bytes)"
    ;;
  head)
    db_host="" db_dir=""
    while [ $# -gt 0 ]; do
      case "$1" in
        --db-host) db_host=$2; shift 2 ;;
        --db-dir) db_dir=$2; shift 2 ;;
        *) log "unknown argument $1"; exit 2 ;;
      esac
    done
    [ -r "$conf" ] || { log "no slurm.conf at $conf"; exit 1; }
    start_munge
    install -d /etc/slurm
    cp "$conf" /etc/slurm/slurm.conf
    printf 'Include %s\n' "$gres_devices" > /etc/slurm/gres.conf
    : > "$gres_devices"
    if [ -n "$db_dir" ]; then
      if [ -s "$db_dir/goldenenv-exported-to" ] && [ -s "$(cat "$db_dir/goldenenv-exported-to")" ]; then
        log "the database folder is a destroyed cluster's copy: starting from its export instead"
        find "$db_dir" -mindepth 1 -delete
      fi
      start_mariadb "$db_dir" 127.0.0.1
      install -d -m 0700 "$db_run"
      printf '%s\n' "$db_dir" > "$db_run/datadir"
      db_host=127.0.0.1
    fi
    if [ -n "$db_host" ]; then
      db_client_conf "$db_host"
      wait_db
      restore_accounting
      start_slurmdbd "$db_host"
    fi
    state=$(sed -n 's/^StateSaveLocation=//p' "$conf")
    install -d -o slurm -g slurm -m 0750 "${state:-/var/spool/slurmctld}"
    if [ -n "$db_host" ] && [ ! -e "${state:-/var/spool/slurmctld}/job_state" ]; then
      # a new queue on a kept history (a destroy's, restored): job ids go on after the history's, so no id means
      # two jobs in sacct, goldenenv cost or goldenenv logs
      cluster=$(sed -n 's/^ClusterName=//p' "$conf")
      last=$(mariadb --defaults-extra-file="$db_client" -N -e \
        "SELECT COALESCE(MAX(id_job), 0) FROM \`${cluster}_job_table\`" "$db_name" 2> /dev/null || echo 0)
      if [ "${last:-0}" -gt 0 ]; then
        echo "FirstJobId=$((last + 1))" >> /etc/slurm/slurm.conf
        log "job ids go on from $((last + 1)), after the accounting history's"
      fi
    fi
    start_team head
    log "slurmctld $(slurmctld -V)"
    exec slurmctld -D -i
    ;;
  node)
    server="" gpus=0 features=() spot="" health="" gres=gpu gres_prefix=/dev/nvidia
    while [ $# -gt 0 ]; do
      case "$1" in
        --conf-server) server=$2; shift 2 ;;
        --gpus) gpus=$2; shift 2 ;;
        --gres) gres=$2; shift 2 ;;
        --gres-devices) gres_prefix=$2; shift 2 ;;
        --feature) features+=("$2"); shift 2 ;;
        --spot) spot=$2; shift 2 ;;
        --health) health=$2; shift 2 ;;
        *) log "unknown argument $1"; exit 2 ;;
      esac
    done
    [ -n "$server" ] || { log "node needs --conf-server HOST"; exit 2; }
    start_munge
    start_team node
    node_conf=""
    if [ "$gpus" -gt 0 ]; then node_conf="Gres=$gres:$gpus"; fi
    if [ ${#features[@]} -gt 0 ]; then
      node_conf="${node_conf:+$node_conf }Feature=$(IFS=,; echo "${features[*]}")"
    fi
    install -d /var/spool/slurmd /etc/slurm /etc/goldenenv/health
    if [ -n "$health" ]; then
      # what this node should have (catalog: GPUs, NVLinks, fabric devices), for Slurm's HealthCheckProgram
      goldenenv-health expect "$health" > /etc/goldenenv/health/expect.json
    fi
    : > "$gres_devices"
    for device in "$gres_prefix"[0-9]*; do
      if [[ $device =~ ^${gres_prefix}[0-9]+$ ]]; then echo "Name=$gres File=$device" >> "$gres_devices"; fi
    done
    log "slurmd $(slurmd -V), registering with $server"
    cache=/var/spool/slurmd/conf-cache/slurm.conf
    if [ -s "$cache" ]; then
      # this container ran slurmd before: it restarted, and every task it had died with it. slurmctld is told at
      # once, so it ends the node's jobs (NODE_FAIL) and requeues them rather than wait for tasks that are gone;
      # the node is back in service when its slurmd registers (ReturnToService=2)
      SLURM_CONF=$cache scontrol update nodename="$(hostname -s)" state=down \
        reason="goldenenv: node restarted, its jobs were lost" || log "could not tell slurmctld this node restarted"
    fi
    if [ -n "$spot" ]; then
      node=$(hostname -s)
      # a spot notice drains this node (reason: the notice), so no new job lands on it; the job's own watcher
      # checkpoints and requeues it. When the node is back, a drain the watcher set is lifted.
      goldenenv-spotwatch --cloud "$spot" --drain-node "$node" &
      (
        sleep 30
        reason=$(scontrol show node "$node" 2>/dev/null | sed -n 's/.*Reason=\(goldenenv spot[^[]*\).*/\1/p')
        if [ -n "$reason" ]; then
          log "node is back after a spot notice ($reason): resuming it"
          scontrol update nodename="$node" state=resume || log "could not resume $node"
        fi
      ) &
    fi
    exec slurmd -D -Z --conf-server "$server" ${node_conf:+--conf "$node_conf"}
    ;;
  *)
    log "usage: goldenenv-slurm head [--db-host HOST | --db-dir DIR] | db [--datadir DIR] | export-accounting FILE"
    log "       | node --conf-server HOST [--gpus N] [--feature F]..."
    exit 2
    ;;
esac
