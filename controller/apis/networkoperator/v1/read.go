package v1

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/egressflow/egressflow/controller/reasons"
)

// The one reading of an EgressRouter's spec: what a holder serves, and
// the problems that keep it from serving the router at all. The CRD
// refuses each of these when an object is written; Read finds them in
// objects stored before it did, or under another CRD of the group (a
// cluster that still has OpenShift's).

// RouterAddress is a reserved address as read: the address with its
// subnet's prefix length, and the gateway (invalid when none is given).
//
// +k8s:deepcopy-gen=false
type RouterAddress struct {
	Prefix  netip.Prefix
	Gateway netip.Addr
}

// RedirectRule is a redirect rule as read: connections to Port over
// Protocol go to Destination's TargetPort (Port when the rule gives none).
//
// +k8s:deepcopy-gen=false
type RedirectRule struct {
	Protocol         ProtocolType
	Port, TargetPort uint16
	Destination      netip.Addr
}

// Redirect is an EgressRouter's spec as read: its reserved addresses (one
// per family at most, in the spec's order), its rules in the spec's order,
// the fallback (invalid: other ports are refused), and the interface a
// holder's uplink must be ("": any).
//
// +k8s:deepcopy-gen=false
type Redirect struct {
	Addresses []RouterAddress
	Rules     []RedirectRule
	Fallback  netip.Addr
	Master    string
}

// Problem is why a router cannot be served as written.
//
// +k8s:deepcopy-gen=false
type Problem struct {
	Reason  reasons.Reason
	Message string
}

// Address returns the reserved address of addr's family, if the router has
// one.
func (r Redirect) Address(is6 bool) (RouterAddress, bool) {
	for _, a := range r.Addresses {
		if a.Prefix.Addr().Is6() == is6 {
			return a, true
		}
	}
	return RouterAddress{}, false
}

// Read reads the spec. A router with any problem is not served at all
// (never a part of it): the problems say why, in the spec's order.
func (s EgressRouterSpec) Read() (Redirect, []Problem) {
	var out Redirect
	var problems problemList
	if s.Mode != "" && s.Mode != EgressRouterModeRedirect {
		problems.add(reasons.InvalidRule, "spec.mode: %q is not served; only Redirect is", s.Mode)
	}
	switch m := s.NetworkInterface.Macvlan; {
	case m.Mode != "" && m.Mode != MacvlanModeBridge && m.Mode != MacvlanModePrivate && m.Mode != MacvlanModeVEPA && m.Mode != MacvlanModePassthru:
		problems.add(reasons.InvalidRule, "spec.networkInterface.macvlan.mode: %q is not one of Bridge, Private, VEPA, Passthru", m.Mode)
	case m.Master != "" && (len(m.Master) > 15 || strings.ContainsAny(m.Master, "/: \t\n")):
		problems.add(reasons.InvalidRule, "spec.networkInterface.macvlan.master: %q is not an interface name", m.Master)
	default:
		out.Master = m.Master
	}
	before := len(problems)
	out.Addresses = readAddresses(s.Addresses, &problems)
	if s.Redirect == nil {
		problems.add(reasons.InvalidRule, "spec.redirect: mode Redirect needs it")
		return out, problems
	}
	// A destination's family is checked against addresses read whole: an
	// address with a problem is reported once, not again for each rule.
	out.Rules, out.Fallback = readRedirect(*s.Redirect, out, len(problems) == before, &problems)
	return out, problems
}

// problemList collects the problems of one reading.
type problemList []Problem

func (l *problemList) add(reason reasons.Reason, format string, args ...any) {
	*l = append(*l, Problem{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// plainAddr parses an address as the spec's fields take it: no zone, and
// IPv4 not written as IPv6.
func plainAddr(text string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(text)
	return a, err == nil && a.Zone() == "" && !a.Is4In6()
}

// onLink reports whether a reserved address's holder reaches gateway
// directly, as a router's own interface would: another address of the
// reserved address's subnet, or an IPv6 link-local one.
func onLink(gateway netip.Addr, reserved netip.Prefix) bool {
	return (gateway.Is6() && gateway.IsLinkLocalUnicast()) || (reserved.Contains(gateway) && gateway != reserved.Addr())
}

// readAddresses reads spec.addresses, one per family.
func readAddresses(addresses []EgressRouterAddress, problems *problemList) []RouterAddress {
	var out []RouterAddress
	if len(addresses) == 0 {
		problems.add(reasons.InvalidAddress, "spec.addresses: none given")
	}
	for i, a := range addresses {
		prefix, err := netip.ParsePrefix(a.IP) // takes no zone
		if err != nil || prefix.Addr().Is4In6() {
			problems.add(reasons.InvalidAddress, "spec.addresses[%d].ip: %q is not an address with its prefix length", i, a.IP)
			continue
		}
		addr := RouterAddress{Prefix: prefix}
		if a.Gateway != "" {
			gw, ok := plainAddr(a.Gateway)
			if !ok || gw.Is6() != prefix.Addr().Is6() {
				problems.add(reasons.InvalidAddress, "spec.addresses[%d].gateway: %q is not an address of the family of %s", i, a.Gateway, a.IP)
				continue
			}
			if !onLink(gw, prefix) {
				problems.add(reasons.InvalidAddress, "spec.addresses[%d].gateway: %s is not another address of %s's subnet, nor an IPv6 link-local one", i, gw, a.IP)
				continue
			}
			addr.Gateway = gw
		}
		if (Redirect{Addresses: out}).hasFamily(prefix.Addr()) {
			problems.add(reasons.InvalidAddress, "spec.addresses[%d].ip: %s is a second address of its family", i, a.IP)
			continue
		}
		out = append(out, addr)
	}
	return out
}

// readRedirect reads spec.redirect's rules and fallback; checkFamily:
// against the addresses read in r.
func readRedirect(spec RedirectConfig, r Redirect, checkFamily bool, problems *problemList) ([]RedirectRule, netip.Addr) {
	var rules []RedirectRule
	destination := func(field, text string) (netip.Addr, bool) {
		a, ok := plainAddr(text)
		switch {
		case !ok:
			problems.add(reasons.InvalidRule, "%s: %q is not an address", field, text)
		case checkFamily && !r.hasFamily(a):
			problems.add(reasons.WrongFamily, "%s: %s has no address of its family in spec.addresses to leave from", field, text)
		default:
			return a, true
		}
		return netip.Addr{}, false
	}
	seen := map[RedirectRule]bool{} // by protocol and port only
	for i, rule := range spec.RedirectRules {
		field := fmt.Sprintf("spec.redirect.redirectRules[%d]", i)
		switch {
		case rule.Protocol != ProtocolTypeTCP && rule.Protocol != ProtocolTypeUDP && rule.Protocol != ProtocolTypeSCTP:
			problems.add(reasons.InvalidRule, "%s.protocol: %q is not one of TCP, UDP, SCTP", field, rule.Protocol)
			continue
		case rule.Port < 1 || rule.Port > 65535:
			problems.add(reasons.InvalidRule, "%s.port: %d is not in 1-65535", field, rule.Port)
			continue
		case rule.TargetPort < 0 || rule.TargetPort > 65535:
			problems.add(reasons.InvalidRule, "%s.targetPort: %d is not in 1-65535", field, rule.TargetPort)
			continue
		}
		key := RedirectRule{Protocol: rule.Protocol, Port: uint16(rule.Port)}
		if seen[key] {
			problems.add(reasons.InvalidRule, "%s: a second rule for %s port %d", field, rule.Protocol, rule.Port)
			continue
		}
		seen[key] = true
		dst, ok := destination(field+".destinationIP", rule.DestinationIP)
		if !ok {
			continue
		}
		target := uint16(rule.TargetPort)
		if target == 0 {
			target = key.Port
		}
		rules = append(rules, RedirectRule{Protocol: rule.Protocol, Port: key.Port, TargetPort: target, Destination: dst})
	}
	var fallback netip.Addr
	if spec.FallbackIP != "" {
		fallback, _ = destination("spec.redirect.fallbackIP", spec.FallbackIP)
	}
	if spec.FallbackIP == "" && len(spec.RedirectRules) == 0 {
		problems.add(reasons.InvalidRule, "spec.redirect: neither a fallbackIP nor a rule")
	}
	return rules, fallback
}

// hasFamily says whether r has a reserved address of a's family.
func (r Redirect) hasFamily(a netip.Addr) bool {
	_, ok := r.Address(a.Is6())
	return ok
}
