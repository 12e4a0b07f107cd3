#!/usr/bin/env bash
# The node layout egressflow expects, built from the node's uplink NIC: an
# Open vSwitch bridge (BRIDGE) with the uplink (UPLINK) as its port 1, the
# uplink's MAC as the bridge's, and the uplink's global addresses and
# default routes moved to the bridge's LOCAL port; OpenFlow 1.5 spoken.
# Run it once at boot, after Open vSwitch starts and before the kubelet
# (egressflow-node-bridge.service does), as root. It may run again (after
# an Open vSwitch restart, or a container node's restart, whose uplink gets
# its addresses back): it moves whatever global addresses the uplink holds,
# and changes nothing where there are none.
#
# Settings: the environment, or /etc/egressflow/node.env (node.env in this
# folder is the example): UPLINK, BRIDGE, DATAPATH.
set -euo pipefail
env_file=${EGRESSFLOW_NODE_ENV:-/etc/egressflow/node.env}
# shellcheck disable=SC1090
[ -f "$env_file" ] && . "$env_file"
UPLINK=${UPLINK:?UPLINK: the uplink NIC}
BRIDGE=${BRIDGE:-br-ex}
DATAPATH=${DATAPATH:-system}

mac=$(cat "/sys/class/net/$UPLINK/address")
v4=$(ip -4 -o addr show dev "$UPLINK" scope global | awk '{print $4}')
v6=$(ip -6 -o addr show dev "$UPLINK" scope global | awk '{print $4}')
gw4=$(ip -4 route show default dev "$UPLINK" | awk '{print $3; exit}')
gw6=$(ip -6 route show default dev "$UPLINK" | awk '{print $3; exit}')

ovs-vsctl --may-exist add-br "$BRIDGE" -- set bridge "$BRIDGE" datapath_type="$DATAPATH" \
  protocols=OpenFlow13,OpenFlow15 other-config:hwaddr="$mac"
ovs-vsctl --may-exist add-port "$BRIDGE" "$UPLINK" -- set interface "$UPLINK" ofport_request=1
ip addr flush dev "$UPLINK" scope global
ip link set "$BRIDGE" up
for a in $v4; do ip addr replace "$a" dev "$BRIDGE"; done
for a in $v6; do ip -6 addr replace "$a" dev "$BRIDGE" nodad; done
[ -z "$gw4" ] || ip route replace default via "$gw4" dev "$BRIDGE"
[ -z "$gw6" ] || ip -6 route replace default via "$gw6" dev "$BRIDGE"

if [ "$DATAPATH" = netdev ]; then
  # The userspace datapath reads the uplink through a packet socket; the
  # kernel must not also take its frames (every reply would arrive twice).
  nft add table netdev egressflow-guard
  nft add chain netdev egressflow-guard in "{ type filter hook ingress device $UPLINK priority 0; policy drop; }"
fi
echo "br-ex.sh: $UPLINK is port 1 of $BRIDGE ($DATAPATH datapath), with ${v4//$'\n'/ } ${v6//$'\n'/ }"
