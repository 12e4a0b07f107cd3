#!/usr/bin/env bash
# Runs inside a node container (docker exec) of the cluster in Docker: makes
# it a Kubernetes node laid out as OVN-Kubernetes and OpenShift nodes are.
#   eth0 (the container's uplink) is a port of the OVS bridge br-ex, and the
#   node's addresses and default routes sit on br-ex's LOCAL port; pods hang
#   off a Linux bridge (Debian's bridge CNI plugin, no masquerade) and reach
#   br-ex through the host stack, routed, as a host-gw CNI delivers them;
#   or, with POD_NETWORK=flannel-<backend>, flannel's (VXLAN or host-gw).
# Then containerd, the kubelet and kube-proxy start, detached.
# br-ex and the cold guard come from the node recipe operators run
# (deploy/node: br-ex.sh, cold-guard.sh, copied to /egressflow/node).
# Inputs: /egressflow (read-only: binaries, kubeconfigs, image tarballs) and
# the environment: NODE_NAME, POD_NETWORK ("", flannel-vxlan or
# flannel-host-gw: the pod network, test/dockercluster's PodNetwork),
# POD_CIDR4, POD_CIDR6, CLUSTER_CIDRS, SERVICE_CIDRS, PEER_ROUTES
# ("cidr=via ..." for the other nodes' pod CIDRs, with the bridge plugin),
# and EGRESSFLOW_COLD_GUARD (set: egressflow is installed).
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

# Open vSwitch, then br-ex over eth0 by the node recipe operators run
# (deploy/node/br-ex.sh), on the userspace datapath: these machines have no
# openvswitch kernel module.
/usr/share/openvswitch/scripts/ovs-ctl start --system-id=random --no-ovs-vswitchd
/usr/share/openvswitch/scripts/ovs-ctl start --no-ovsdb-server
export EGRESSFLOW_NODE_ENV=none UPLINK=eth0 BRIDGE=br-ex DATAPATH=netdev
bash /egressflow/node/br-ex.sh >&2
v4=$(ip -4 -o addr show dev br-ex scope global | awk '{print $4; exit}')
v6=$(ip -6 -o addr show dev br-ex scope global | awk '{print $4; exit}')

# A node with egressflow installed boots with its cold guard in place
# before the kubelet starts any pod: after a reboot the pods may start
# before the agent does (README, "Installing egressflow"). The recipe's
# deploy/node/cold-guard.sh, as its systemd unit runs it.
if [ -n "${EGRESSFLOW_COLD_GUARD:-}" ]; then
  EGRESSFLOW_AGENT=/egressflow/egressflow-agent POD_CIDRS="$CLUSTER_CIDRS" \
    bash /egressflow/node/cold-guard.sh
fi

# The pod network.
mkdir -p /etc/cni/net.d
case "${POD_NETWORK:-}" in
"")
  # A Linux bridge per node, routes to the other nodes'.
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
  ;;
flannel-vxlan | flannel-host-gw)
  # flanneld with the Kubernetes subnet manager (the Node's pod CIDRs),
  # its backend (VXLAN or host-gw) over br-ex's addresses, both families, and no masquerade of its
  # own; its CNI plugin delegates to the bridge plugin, told not to
  # masquerade either (it would, when flanneld does not).
  cp /egressflow/cni-flannel /usr/lib/cni/flannel
  mkdir -p /etc/kube-flannel
  cat >/etc/kube-flannel/net-conf.json <<NET
{"Network": "${CLUSTER_CIDRS%%,*}", "IPv6Network": "${CLUSTER_CIDRS#*,}", "EnableIPv6": true, "Backend": {"Type": "${POD_NETWORK#flannel-}"}}
NET
  cat >/etc/cni/net.d/10-flannel.conflist <<CNI
{
  "cniVersion": "0.4.0",
  "name": "pods",
  "plugins": [{
    "type": "flannel",
    "delegate": {"bridge": "cni0", "hairpinMode": true, "isDefaultGateway": true, "ipMasq": false}
  }, {"type": "portmap", "capabilities": {"portMappings": true}}]
}
CNI
  # Restarted when it exits, as its DaemonSet's pod would be: it exits
  # while the Node is not registered yet or has no pod CIDRs.
  NODE_NAME=$NODE_NAME setsid bash -c 'while true; do
    /egressflow/flanneld --kube-subnet-mgr --kubeconfig-file=/egressflow/flannel.kubeconfig \
      --iface=br-ex --ip-masq=false --net-config-path=/etc/kube-flannel/net-conf.json
    sleep 1
  done' >/var/log/flanneld.log 2>&1 </dev/null &
  ;;
*)
  echo "unknown POD_NETWORK $POD_NETWORK" >&3
  exit 1
  ;;
esac

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
