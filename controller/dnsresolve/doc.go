// Package dnsresolve follows the addresses of the DNS names that
// EgressFirewall rules name (dnsName), for the node agent. It owns the
// lookups (its own DNS client over UDP and TCP), the TTL bookkeeping and
// the map the agent hands to dataplane.ComputeFirewall as `resolved`:
// keyed by esv1.DNSNameKey (lower case, no final dot, "*." kept).
// It does not import the dataplane, read API objects (it takes only the
// name-key rule from the API package) or touch the bridge.
//
// # Lookups
//
// Each wanted exact name is asked as an absolute name, A and AAAA in
// parallel, over UDP to the first nameserver, over TCP when the reply is
// truncated (no EDNS(0) is offered: UDP replies are at most 512 bytes).
// The nameservers are Config.Servers, or the `nameserver` lines of a
// resolv.conf (default /etc/resolv.conf, port 53, IPv6 too): in the
// agent's pod that is the cluster DNS, which the pods ask too, so both
// see answers from the same cache. A timeout, a network error, a reply
// that does not parse, or SERVFAIL, REFUSED or another error code moves
// on to the next server. The answer section's CNAME chain is followed
// from the asked name; the A/AAAA records owned by its last name are the
// answer, each with the least TTL along the chain.
//
// # Addresses are sticky for their TTL
//
// An address stays in its name's set until its own TTL (at least MinTTL,
// at most MaxAddressTTL) has run out since the last answer that gave it,
// the rule a DNS cache follows, plus a grace of Prefetch (2 s) so that the
// lookup refreshing it always ends first. The set is therefore the union
// of every answer that a cache (a pod's, CoreDNS's) could still hold when
// they get their answers from the same upstream. The reference
// (ovn-kubernetes) replaces the set with each answer, and flakes when
// the firewall's answer and the pod's differ (openshift/enhancements,
// dns/coredns-egressfirewall-integration.md): here an address the pod
// still has cached stays allowed (or denied) after the upstream stopped
// giving it, until its TTL has run out.
//
// Addresses do not expire while a lookup of their name is due, under way
// or failing (holding): a TTL of 0 is asked exactly when its addresses
// expire, and a lookup that waits for a slow server must not empty the
// set meanwhile.
//
// # When a name is asked again
//
//   - After an answer: at the answer's TTL (the least of its records'; for
//     NXDOMAIN and NODATA the SOA's negative TTL if the reply has a SOA),
//     clamped to [MinTTL 5 s, MaxTTL 30 min], less Prefetch (2 s) so the
//     new answer is in place before a cache that fetched at the same time
//     fetches again, never sooner than MinTTL. A TTL of 0 is asked every
//     5 s, as the reference does. It is the last answer's TTL that counts,
//     not that of addresses it left out, which keep their own expiry.
//   - After an answer that differs from the one before: at MinTTL. A name
//     whose answers vary (a round-robin server answering 2 of its 4
//     addresses, cache replicas holding different answers) is sampled
//     every MinTTL, so each subset is seen again well within its TTL and
//     the set converges to, and keeps, the union; once two answers in a
//     row agree, the pace is the TTL's again. Without it a rotating name
//     would hold only the subsets of the last TTL, not those a pod's cache
//     may have fetched in between.
//   - After a failure (either query timed out or got an error code): every
//     RetryInterval (5 s) for RetryAttempts (10) failures in a row, then
//     doubling up to MaxBackoff (2 min), as the reference does.
//
// While a name's lookups fail, its known addresses are kept, whatever
// their TTL, until an answer comes again (as a cache serving stale
// answers does, RFC 8767): dropping them on a resolver hiccup would flip
// a rule for connections that still work, and the failing lookup says
// nothing about them.
//
// # The snapshot
//
// A name is absent from Snapshot until its first answer, and stays absent
// while it only fails (the dataplane reports it as unresolved). NXDOMAIN
// and NODATA are answers: the name is present with no addresses once its
// known ones expire. Names no longer wanted (SetNames) are forgotten.
// Changed is signalled whenever Snapshot may differ, expiries included:
// the scheduler wakes at each name's earliest expiry.
//
// # Wildcards
//
// A wildcard ("*.example.com") cannot be looked up: its names cannot be
// listed. It is filled by answers about the names it covers: those the
// resolver gets for wanted exact names, and those the agent passes to
// Learn (a pod's DNS replies, for instance), with the same expiry rule.
// The "*" is exactly one label, as the reference defines it
// (ovn-kubernetes' EgressFirewallDestination.dnsName in
// go-controller/pkg/crd/egressfirewall/v1/types.go, and OpenShift's
// DNSNameResolver: "*.example.com will match sub1.example.com but won't
// match sub2.sub1.example.com"). A wildcard is absent until an answer
// about one of its names came; a negative one (NXDOMAIN for
// a.example.com) makes it present with no address.
//
// # Scheduling
//
// Run is one goroutine with a heap of deadlines (each name's next lookup
// and next expiry); at most maxConcurrentLookups lookups run at once.
// Lookup and expiry times follow Config.Clock; query timeouts are real
// time.
package dnsresolve
