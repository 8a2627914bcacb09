#!/bin/bash
# goldenenv-healthcheck: Slurm's HealthCheckProgram on every node of a goldenenv cluster (slurm.conf), run by slurmd
# as root in the node's golden container every HealthCheckInterval seconds. It collects the quick health level's
# evidence (GPU list, XIDs, row remapping, NVLink, fabric devices; seconds of work), judges it with goldenenv-health
# against the catalog's rules and this node's expectations, and drains the node with the failing rule as the reason,
# so no job lands on it. A drain it set is lifted once the node judges healthy again; any other drain (an operator's,
# the spot watcher's) is left alone. Slurm kills a check that runs past 60 s, so the evidence gets 50 s in all.
#   /etc/goldenenv/health/expect.json   what this node should have (written by goldenenv-slurm node --health)
#   /etc/goldenenv/health/recorded/     recorded evidence that stands in for the hardware (tests, post-mortems)
set -uo pipefail
dir=/etc/goldenenv/health
expect=$dir/expect.json
rules=/usr/local/share/goldenenv/health-rules.json
prefix="goldenenv health:"
node=${SLURMD_NODENAME:-$(hostname -s)}
cache=/var/spool/slurmd/conf-cache/slurm.conf  # a configless node's copy of the head's slurm.conf
if [ -z "${SLURM_CONF:-}" ] && [ -s "$cache" ]; then export SLURM_CONF=$cache; fi
log() { logger -t goldenenv-healthcheck -- "$*" 2>/dev/null || echo "goldenenv-healthcheck: $*" >&2; }

[ -r "$expect" ] || exit 0  # nothing said about this node: nothing to judge
evidence=$dir/recorded
if [ ! -d "$evidence" ]; then
  evidence=$(mktemp -d)
  trap 'rm -rf "$evidence"' EXIT
  timeout 50 goldenenv-health collect --level quick --expect "$expect" --out "$evidence" || log "collecting timed out"
fi
reason=$(goldenenv-health judge --evidence "$evidence" --expect "$expect" --rules "$rules" --node "$node" --reason)
verdict=$?
current=$(scontrol show node "$node" 2>/dev/null | sed -n 's/^ *Reason=\(.*\) \[[^]]*\]$/\1/p')
if [ "$verdict" -eq 1 ]; then
  if [ "$current" != "$prefix $reason" ]; then
    log "draining $node: $reason"
    scontrol update nodename="$node" state=drain reason="$prefix $reason" || log "could not drain $node"
  fi
elif [ "$verdict" -eq 0 ] && [[ $current == "$prefix"* ]]; then
  log "$node is healthy again: resuming it"
  scontrol update nodename="$node" state=resume || log "could not resume $node"
fi
exit 0
