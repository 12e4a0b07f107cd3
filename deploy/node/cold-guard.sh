#!/usr/bin/env bash
# Holds every pod of the node to egressflow's fail-closed pipeline until the
# agent's first sync admits each known pod (egressflow-agent --cold-guard):
# after a reboot the kubelet may start pods before the agent, on a bridge
# that came up with no flow but NORMAL. Run it at boot after br-ex.sh and
# before the kubelet (egressflow-cold-guard.service does), as root.
#
# Settings: the environment, or /etc/egressflow/node.env: BRIDGE, UPLINK,
# POD_CIDRS, SERVICE_CIDRS; EGRESSFLOW_AGENT is the agent binary
# (/usr/local/bin/egressflow-agent: copy it out of the image), NODE_NAME
# the node's name ($(hostname) by default).
set -euo pipefail
env_file=${EGRESSFLOW_NODE_ENV:-/etc/egressflow/node.env}
# shellcheck disable=SC1090
[ -f "$env_file" ] && . "$env_file"
exec "${EGRESSFLOW_AGENT:-/usr/local/bin/egressflow-agent}" --cold-guard \
  --node-name="${NODE_NAME:-$(hostname)}" --bridge="${BRIDGE:-br-ex}" --uplink="${UPLINK:?UPLINK}" \
  --ovs-rundir="${OVS_RUNDIR:-/var/run/openvswitch}" \
  --pod-cidrs="${POD_CIDRS:?POD_CIDRS}" --service-cidrs="${SERVICE_CIDRS:?SERVICE_CIDRS}"
