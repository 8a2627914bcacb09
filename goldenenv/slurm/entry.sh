#!/bin/bash
# goldenenv-slurm: the scheduler daemons of a goldenenv cluster, started in its golden container (as root).
#   goldenenv-slurm head                                   munged, then slurmctld in the foreground
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

start_munge() {
  local waited=0
  until [ -s "$key_source" ]; do
    if [ $waited -ge 120 ]; then log "no munge key at $key_source after ${waited}s"; exit 1; fi
    sleep 1; waited=$((waited + 1))
  done
  install -d -o munge -g munge -m 0700 /run/munge-key /var/lib/munge /var/log/munge
  install -d -o munge -g munge -m 0755 /run/munge
  install -o munge -g munge -m 0400 "$key_source" "$key"
  runuser -u munge -- /usr/sbin/munged --key-file="$key" --force
}

role=${1:-}
shift || true
case "$role" in
  head)
    [ -r "$conf" ] || { log "no slurm.conf at $conf"; exit 1; }
    start_munge
    install -d /etc/slurm
    cp "$conf" /etc/slurm/slurm.conf
    printf 'Include %s\n' "$gres_devices" > /etc/slurm/gres.conf
    : > "$gres_devices"
    state=$(sed -n 's/^StateSaveLocation=//p' "$conf")
    install -d -o slurm -g slurm -m 0750 "${state:-/var/spool/slurmctld}"
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
    log "usage: goldenenv-slurm head | node --conf-server HOST [--gpus N] [--feature F]..."
    exit 2
    ;;
esac
