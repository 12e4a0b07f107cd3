package dnsresolve

import "strings"

// isWildcard reports whether key is a wildcard ("*.example.com").
func isWildcard(key string) bool {
	return strings.HasPrefix(key, "*.")
}

// wildcardKey is the one wildcard that covers key: its first label
// replaced by "*" ("a.example.com" → "*.example.com"), or "" for a
// one-label name. The "*" stands for exactly one label, as the reference
// defines it (ovn-kubernetes' EgressFirewallDestination.dnsName and
// OpenShift's DNSNameResolver: "*.example.com will match sub1.example.com
// but won't match sub2.sub1.example.com"), so a name is covered by this
// wildcard only; a wildcard covers itself.
func wildcardKey(key string) string {
	if isWildcard(key) {
		return key
	}
	dot := strings.IndexByte(key, '.')
	if dot <= 0 || dot == len(key)-1 {
		return ""
	}
	return "*" + key[dot:]
}
