// Package heartbeat is the node-agent liveness protocol that the node agent
// and the cluster component share.
//
// # Protocol
//
// Every node agent holds one coordination.k8s.io/v1 Lease named after its
// node, in the component's namespace (egressflow-system in deploy/), labelled
// LeaseLabel=LeaseLabelValue so that readers can watch agent Leases only.
// The agent renews it every RenewInterval, and only while a health function
// supplied by the caller says the agent is healthy: a wedged agent stops
// renewing and its node stops being a candidate. Each renewal also writes the
// node's dataplane facts as annotations (see Facts): the MAC address of its
// bridge, the addresses other nodes steer to, its sync state, and its host
// addresses, which every agent treats as cluster-internal destinations.
// Readers need nothing but the Lease.
//
// Spec.RenewTime is the renewal instant (microsecond precision) and
// Spec.LeaseDurationSeconds the validity in whole seconds, rounded up, for
// kubectl and other Lease readers. Because this protocol aims at sub-second
// precision, the exact validity is also written to the AnnotationDuration
// annotation; Expiry prefers it.
//
// The cluster side calls Fresh: a Lease is fresh while
// renewTime + leaseDuration > now. It schedules a check at Expiry instead of
// waiting for a periodic resync, so an agent that stops renewing is noticed
// at the instant its Lease runs out.
//
// # Restarts: the handover
//
// An agent that stops lets its Lease run out, so a dead agent's node fails
// over after LeaseDuration (3 s). A rolling update of the DaemonSet would
// then fail over every hosted service, though the flows stay on the bridge
// and the successor starts within seconds. So an agent whose own Pod is
// being deleted through the API (a rollout, or a delete) renews one last
// time with a validity of DefaultRestartGrace (20 s) instead: the successor
// renews normally once it has synced, shortening it again. A node that dies
// sends no handover, and one that shuts down neither (the kubelet stops its
// pods without deleting them): both still fail over after LeaseDuration.
// The price: if the successor never comes (the DaemonSet deleted, the new
// image broken), the node's services fail over after the grace, not after
// LeaseDuration. Renewer.Handover; cmd/egressflow-agent decides.
//
// # Clock skew
//
// renewTime is read from the agent's clock and compared with the reader's
// clock, so a skew of s between them moves the perceived expiry by s: an
// agent whose clock runs ahead looks alive for s longer after it died; one
// whose clock runs behind looks dead unless s < leaseDuration - renewInterval
// (2 s with the defaults). Nodes kept in sync by NTP or chrony are within a
// few milliseconds of each other, which these defaults tolerate by a wide
// margin. Where clocks cannot be trusted, raise LeaseDuration (not
// RenewInterval): the margin grows with the gap between the two.
//
// # Cost, and tuning for large clusters
//
// The defaults (renew every 1 s, expire after 3 s) give failover in about 3 s
// after an agent dies, and cost one Lease update per node per second: 1,000
// writes/s at 1,000 nodes, all of them to etcd, plus one watch event per
// write to every reader of agent Leases (the cluster component, and node
// agents that read their peers' facts). The write rate is
// nodes/RenewInterval and failover time is about LeaseDuration, so
// LeaseDuration/RenewInterval (3) is how many renewals in a row can be lost
// before a live node is declared dead.
//
// At 5,000 nodes the defaults mean 5,000 writes/s, which is more than a
// typical etcd should absorb next to the rest of the cluster. Keep the ratio
// at 3 and stretch both: RenewInterval 5 s and LeaseDuration 15 s give
// 1,000 writes/s and failover in about 15 s; RenewInterval 10 s and
// LeaseDuration 30 s give 500 writes/s (kubelet's own node Leases renew every
// 10 s for 40 s). If failover must stay fast at that size, give agent Leases
// a dedicated etcd (kube-apiserver --etcd-servers-overrides for
// coordination.k8s.io/leases) rather than shortening the interval.
//
// # What this package must not do
//
// It writes only the caller's own Lease (agent side) and reads Leases
// (cluster side). It decides nothing about services or hosts; that is the
// controller's job.
package heartbeat
