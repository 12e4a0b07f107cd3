// Package cluster is the cluster component's control loop: it gives every
// EgressService a host (status.host), labels that node
// egress-service.k8s.ovn.org/<namespace>-<name> for the load-balancer
// announcer, gives every address of every EgressIP a node
// (status.items, egressip.go), follows node agents' liveness through their
// heartbeat Leases (controller/heartbeat), and reports in each EgressQoS's and
// EgressFirewall's status on which live agents' nodes its current
// generation is applied (rollout.go). While leading it also publishes each
// Node's addresses and labels for the agents (controller/nodeview's
// Publisher, one ConfigMap per node). Decisions come from
// controller/assign; this package owns the informers, queues, in-memory
// bookkeeping and API writes.
//
// # Shape
//
// Informers watch EgressServices, EgressIPs, Services, EndpointSlices,
// Nodes, and the agent Leases of the component's namespace. Event handlers only record and
// enqueue. Two rate-limited work queues do the writes:
//
//   - the service queue (namespace/name) decides a host, writes status.host
//     and the Ready condition when they differ (UpdateStatus, retried on
//     conflict with a fresh read), emits Events and metrics;
//   - the node queue (node name) patches a node's service labels to match
//     the services whose status names it, all changes of one node in one
//     merge patch.
//
// An EgressIP queue (names) decides the node of each address of an
// EgressIP and writes status.items and the Assigned condition when they
// differ: one update of the whole object, as EgressIP has no status
// subresource, retried on conflict with a fresh read only while the spec
// is the one decided on. Node, readiness, liveness and published-subnet
// changes re-sync the EgressIPs holding an address on that node and those
// with an address no node holds; a term starts by adopting every valid
// status.items entry (adoptEgressIPs), so a new leader moves nothing that
// is right.
//
// A third, delaying queue re-checks each agent Lease at the instant it
// expires, so a dead agent is noticed then and not at the next resync. Two
// more (namespace/name) write the status of the node-local APIs, from the
// revision at which each object's generation was first seen and the
// watermarks agents publish on their Leases (rollout.go says how, and what
// it relies on; rollout_status.go is the verdict and the writes they
// share): EgressQoS's status.status and Ready, Applied and Valid
// conditions (qos.go), EgressFirewall's status.status and status.messages
// (firewall.go).
//
// Each API's queues belong to a member (member.go): the EgressService
// hosts (services.go: the service and node queues), the EgressIP
// assignment (egressip.go) and the rollouts (rollout.go), each with its
// queues and state in each term and its own metrics, called by the shared
// parts (leadership, the agents' liveness, the Node handlers, the probes)
// through one interface. The next API's cluster-side work is one more
// member.
//
// Writes are level-triggered and idempotent: each sync compares the desired
// state with the cache (or with this replica's own newer write, until the
// cache catches up) and writes only a difference. A resync therefore costs
// no API call.
//
// # Order of writes, and the one-label rule
//
// For a service moving from node A to node B: status.host becomes B first;
// then A's label is removed, and B's label is added only once no other node
// carries it (the addition waits for A's patch; label additions of one key
// are serialized). So one service's label is never on two nodes, and the
// unlabelled gap is one label patch long. The status names the new host
// before the announcer is told, so the new host's agent starts preparing
// SNAT before ingress traffic arrives.
//
// # Leadership
//
// With leader election only the leader runs queues and writes. Each term
// starts from the caches, runs a startup repair (see repair) before any
// worker, and ends by stopping the workers before the Lease is released, so
// two replicas never write at once on a graceful handover. Valid
// assignments found in status.host are adopted, so a new leader moves
// nothing that is right.
//
// # Reasons, Events, metrics
//
// Every decision carries a reasons.Reason, the Ready condition's reason.
// Events are emitted when a write changes the host or the reason, never on a
// resync: Assigned, AllNodes, HostLost (with the node's problem), and the
// reason of a missing host (NoEndpoints, NoMatchingNode, ...). They are
// written by controller/events, which never drops a Warning nor a service's
// latest Event (docs/events.md). Metrics are in metrics.go.
//
// # What it must not touch
//
// It writes only EgressService, EgressQoS and EgressFirewall status,
// EgressIP objects' status (status.items and the Assigned condition,
// written with the object, never its spec, labels or annotations: the
// admission policy egressflow-controller-egressip-status enforces it),
// the service labels of Nodes, its own leader Lease and Events. It never
// writes agent Leases, Services or EndpointSlices.
package cluster
