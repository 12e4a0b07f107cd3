#!/usr/bin/env bash
# Runs inside a node container (docker exec) of the cluster in Docker: makes
# it a Kubernetes node laid out as OVN-Kubernetes and OpenShift nodes are.
#   eth0 (the container's uplink) is a port of the OVS bridge br-ex, and the
#   node's addresses and default routes sit on br-ex's LOCAL port; pods hang
#   off a Linux bridge (Debian's bridge CNI plugin, no masquerade) and reach
#   br-ex through the host stack, routed, as a host-gw CNI delivers them.
# Then containerd, the kubelet and kube-proxy start, detached.
# Inputs: /egressflow (read-only: binaries, kubeconfigs, image tarballs) and
# the environment: NODE_NAME, POD_CIDR4, POD_CIDR6, CLUSTER_CIDRS,
# SERVICE_CIDRS, PEER_ROUTES ("cidr=via ..." for the other nodes' pod
# CIDRs), and EGRESSFLOW_COLD_GUARD (set: egressflow is installed).
set -euo pipefail
log=/var/log/egressflow-node-setup.log
exec 3>&2 2>>"$log"
trap 'echo "node-setup on $NODE_NAME failed at line $LINENO; see $log" >&3; tail -n 20 "$log" >&3' ERR
set -x

# A container's /sys and cgroups are read-only; the kubelet writes both.
mount -o remount,rw /sys
for d in /sys/fs/cgroup/*; do mount -o remount,bind,rw "$d"; done
[ -s /etc/machine-id ] || tr -d - </proc/sys/kernel/random/uuid >/etc/machine-id

# Docker starts a container's interfaces with IPv6 off; cni0, br-ex and the
# pods' veths must have it.
sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0
sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 \
  net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0

# Open vSwitch, and br-ex over eth0 with eth0's MAC, addresses and routes.
/usr/share/openvswitch/scripts/ovs-ctl start --system-id=random --no-ovs-vswitchd
/usr/share/openvswitch/scripts/ovs-ctl start --no-ovsdb-server
mac=$(cat /sys/class/net/eth0/address)
v4=$(ip -4 -o addr show dev eth0 scope global | awk '{print $4; exit}')
v6=$(ip -6 -o addr show dev eth0 scope global | awk '{print $4; exit}')
gw4=$(ip -4 route show default | awk '{print $3; exit}')
gw6=$(ip -6 route show default | awk '{print $3; exit}')
ovs-vsctl --may-exist add-br br-ex -- set bridge br-ex datapath_type=netdev \
  protocols=OpenFlow13,OpenFlow15 other-config:hwaddr="$mac"
ovs-vsctl --may-exist add-port br-ex eth0 -- set interface eth0 ofport_request=1
ip addr flush dev eth0 scope global
ip link set br-ex up
ip addr add "$v4" dev br-ex
ip -6 addr add "$v6" dev br-ex nodad
ip route replace default via "$gw4" dev br-ex
ip -6 route replace default via "$gw6" dev br-ex
# OVS reads eth0 through a packet socket; the kernel must not also take its
# frames (every reply would arrive twice).
nft add table netdev egressflow-guard
nft add chain netdev egressflow-guard in "{ type filter hook ingress device eth0 priority 0; policy drop; }"

# A node with egressflow installed boots with its cold guard in place
# before the kubelet starts any pod: after a reboot the pods may start
# before the agent does (README, "Installing egressflow").
if [ -n "${EGRESSFLOW_COLD_GUARD:-}" ]; then
  /egressflow/egressflow-agent --cold-guard --node-name="$NODE_NAME" --bridge=br-ex --uplink=eth0 \
    --ovs-rundir=/var/run/openvswitch --pod-cidrs="$CLUSTER_CIDRS" --service-cidrs="$SERVICE_CIDRS"
fi

# The pod network: a Linux bridge per node, routes to the other nodes'.
mkdir -p /etc/cni/net.d
cat >/etc/cni/net.d/10-pods.conflist <<CNI
{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "$POD_CIDR4"}], [{"subnet": "$POD_CIDR6"}]],
      "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
    }
  }, {"type": "portmap", "capabilities": {"portMappings": true}}]
}
CNI
for route in $PEER_ROUTES; do
  ip route replace "${route%%=*}" via "${route#*=}"
done

# containerd, with the fixes a node in a container needs.
mkdir -p /etc/containerd
containerd config default >/etc/containerd/config.toml
sed -i \
  -e 's|sandbox_image = .*|sandbox_image = "egressflow-pause:dev"|' \
  -e 's|bin_dir = .*|bin_dir = "/usr/lib/cni"|' \
  -e 's|restrict_oom_score_adj = .*|restrict_oom_score_adj = true|' \
  /etc/containerd/config.toml
setsid containerd >/var/log/containerd.log 2>&1 </dev/null &
for _ in $(seq 100); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.1; done
for image in /egressflow/images/*.tar; do
  ctr -n k8s.io images import "$image" >/dev/null
done

node_ips="${v4%/*},${v6%/*}"
setsid /egressflow/kubelet --config=/egressflow/kubelet.yaml \
  --kubeconfig="/egressflow/$NODE_NAME.kubeconfig" --hostname-override="$NODE_NAME" \
  --node-ip="$node_ips" --v=1 >/var/log/kubelet.log 2>&1 </dev/null &
setsid /egressflow/kube-proxy --kubeconfig=/egressflow/kube-proxy.kubeconfig \
  --hostname-override="$NODE_NAME" --cluster-cidr="$CLUSTER_CIDRS" --proxy-mode=iptables \
  --conntrack-max-per-core=0 --v=1 >/var/log/kube-proxy.log 2>&1 </dev/null &
echo "node $NODE_NAME set up: $v4 $v6 on br-ex" >&3
