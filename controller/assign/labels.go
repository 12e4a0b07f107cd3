package assign

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// LabelPrefix is the prefix (DNS subdomain and slash) of the node label that
// marks a service's host for the load-balancer announcer.
const LabelPrefix = "egress-service.k8s.ovn.org/"

const (
	// maxLabelName is the longest name part of a label key Kubernetes takes.
	maxLabelName = 63
	// labelHashLen is how many hex digits of SHA-256 end a shortened label
	// name: 40 bits, so a collision among 10,000 long names has a probability
	// near 5e-5, while 52 characters of the readable name remain.
	labelHashLen = 10
)

// LabelKey is the node label key of service namespace/name:
// egress-service.k8s.ovn.org/<namespace>-<name>, as the reference writes it,
// whenever <namespace>-<name> fits the 63 characters of a label name.
//
// A longer one (namespace and name can each have 63) is shortened to its
// first 52 characters, with trailing '-' and '.' trimmed, then "-" and the
// first 10 hex digits of the SHA-256 of "<namespace>/<name>". The result is
// stable, a valid label name, still readable, and distinct for distinct
// services in practice. The reference has no answer here (its label write
// fails). Announcers must be configured with the key the Ready condition's
// message and the Assigned Event name.
//
// The format inherits an ambiguity from the reference: namespace "a-b" with
// name "c" and namespace "a" with name "b-c" share a key. The controller
// gives a shared key to one service only (see controller/cluster).
func LabelKey(namespace, name string) string {
	full := namespace + "-" + name
	if len(full) <= maxLabelName {
		return LabelPrefix + full
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	head := strings.TrimRight(full[:maxLabelName-1-labelHashLen], "-.")
	return LabelPrefix + head + "-" + hex.EncodeToString(sum[:])[:labelHashLen]
}

// IsLabelKey says whether a node label key is one of this project's service
// labels.
func IsLabelKey(key string) bool {
	return strings.HasPrefix(key, LabelPrefix)
}
