// Package heartbeat is the node-agent liveness protocol that the node agent
// and the cluster component share: a slow Lease that carries the node's
// facts, and a fast probe protocol that finds a dead or cut-off node within
// a second.
//
// # The Lease: facts, and the slow path
//
// Every node agent holds one coordination.k8s.io/v1 Lease named after its
// node, in the component's namespace (egressflow-system in deploy/), labelled
// LeaseLabel=LeaseLabelValue so that readers can watch agent Leases only.
// The agent renews it every RenewInterval (10 s, as the kubelet renews its
// node Lease), and only while a health function supplied by the caller says
// the agent is healthy: a wedged agent stops renewing and its node stops
// being a candidate. Each renewal also writes the node's dataplane facts as
// annotations (see Facts): the MAC address of its bridge, its sync state,
// its watermarks, its host addresses, its probe address. A change of the
// facts is written at once (within FactsCheckInterval, at most one write per
// MinFactsWriteInterval), not at the next renewal. Readers need nothing but
// the Lease.
//
// The cluster component alone watches the heartbeat Leases. What agents
// read of each other (Facts.Peer: bridge MAC, host addresses, peer key,
// probe address) each agent also writes to its peer-facts Lease
// (PeerFactsLeaseName, "<node>.facts", labelled LeaseLabel=
// PeerFactsLabelValue), only when it changes, and agents watch those: a
// renewal reaches no agent. An agent reads its peers' heartbeat Leases
// too only while some live agent publishes no peer-facts Lease (an older
// version, during an upgrade).
//
// Spec.RenewTime is the renewal instant (microsecond precision) and
// Spec.LeaseDurationSeconds the validity in whole seconds, rounded up, for
// kubectl and other Lease readers; the exact validity is also written to
// the AnnotationDuration annotation, which Expiry prefers.
//
// The cluster side calls Fresh: a Lease is fresh while
// renewTime + leaseDuration > now. It schedules a check at Expiry instead of
// waiting for a periodic resync. A Lease that runs out (40 s after the last
// renewal) is the slow path of failover: it catches a node cut off from the
// API server alone, whose probes still answer, and agents that do not
// answer probes (an older version, or --probe-bind-address empty).
//
// # Fast detection: the probe protocol
//
// The leading cluster component (the observer, Prober) pings every agent
// that publishes a probe address (Facts.ProbeAddress, UDP :9102 in deploy/)
// with a 34-byte datagram: every DefaultHolderProbeInterval (100 ms) an
// agent whose node holds something (an EgressService host, an egress IP),
// every DefaultIdleProbeInterval (1 s) the others. Each ping carries a
// random token that the answer echoes, and the interval, so that the agent
// knows how often to expect it. After SuspectIntervals without an answer
// the observer asks DefaultWitnesses other agents, which answered lately,
// to ping the silent one for it (a ping request, as SWIM's indirect
// probe): a witness that reaches it answers ack, one that does not within
// WitnessTimeout answers nack. An agent is unreachable after DeadIntervals
// without an answer, direct or through a witness, and with at least one
// nack: two observers (the leader and a witness on another node) agree
// before anything moves. With the defaults a dead holder is judged about
// 0.5 s after its last answer. The Judge takes the verdict at once,
// whatever the Lease says, and the disruption rule (below) still holds a
// mass death back. An answer brings the agent back.
//
// What the observer does not hold against anyone:
//
//   - its own silence: an observer that no witness answers (it is the one
//     cut off) judges no one; one that stalled (a freeze of its process,
//     seen as a gap between its rounds) starts every count afresh;
//   - disagreement: a witness that reaches the agent keeps it alive, so a
//     path broken between the observer and one agent alone moves nothing,
//     and nothing moves back and forth;
//   - a restart: an agent that stops for a rolling update hands its Lease
//     over (Renewer.Handover) with AnnotationRestarting, and keeps
//     answering until the observer has seen it; its silence is not judged
//     until the successor renews, or the handover runs out
//     (DefaultRestartGrace, at least the Lease duration).
//
// The probes do not go through the API server: an outage of the API
// server, or of the observer's watch, does not stop them, and moves
// nothing.
//
// # Fencing
//
// An agent fences itself (hosts nothing, drops its endpoints' egress) when
// it may have been judged dead, so that it never sends with an address
// another node has taken over (Responder.Lost):
//
//   - it hears no probe for FenceIntervals of its interval, and none of
//     PeerCheckPeers peers answers its ping within DefaultPeerCheckTimeout:
//     it is cut off. With the defaults that is about 0.3 s after its last
//     probe, before the observer's 0.5 s. Peers that answer show that the
//     observer is away instead (stalled, or a new one being elected), and
//     nothing moves then: no fence;
//   - it stalled itself (a freeze) for DeadIntervals - 1 intervals: it
//     answered nothing meanwhile, so the observer may have moved it;
//   - its Lease ran out unrenewed, and its peers renew (PeerProbe): it is
//     cut off from the API server.
//
// It unfences once the probes are back (or the Lease renewed) and its
// caches agree with a fresh read from the API server.
//
// # Clock skew
//
// renewTime is read from the agent's clock and compared with the reader's
// clock, so a skew of s between them moves the perceived expiry by s: with
// the 40 s Lease and 10 s renewals, clocks within 30 s of each other are
// tolerated (NTP keeps them within milliseconds). The probe protocol
// compares no clocks across nodes: each side times its own silences.
//
// # Cost, and tuning
//
// With the defaults, per second, in a steady state:
//
//	nodes                        100       1,000      5,000
//	Lease writes (API, etcd)      10         100        500
//	probe datagrams, each way  1,000      10,000     50,000   (every node a holder)
//	                             100       1,000      5,000   (no holder)
//
// Each Lease write is one watch event to each replica of the cluster
// component, and to no agent: agents watch the peer-facts Leases, written
// only when a node's bridge MAC, host addresses, key or probe address
// change (a node's start, an address added). A probe costs the observer a
// 34-byte datagram each way and no API call.
//
// Failover time after a holder dies is about DeadIntervals holder
// intervals plus a witness's answer and the new holder's sync (well under
// a second). Tuning: RenewInterval (the agent's --heartbeat-renew-interval)
// trades the write rate against the slow path; keep the Lease duration at
// four intervals. The probe constants trade datagrams against failover
// time; FenceIntervals must stay below DeadIntervals - 1 so that a cut-off
// holder fences before anyone takes over.
//
// # What this package must not do
//
// It writes only the caller's own Lease (agent side) and reads Leases
// (cluster side). It decides nothing about services or hosts; that is the
// controller's job.
package heartbeat
