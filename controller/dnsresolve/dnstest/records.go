package dnstest

import (
	"fmt"
	"net/netip"
)

// Kind is what a Record says about its name.
type Kind int

const (
	KindA           Kind = iota + 1 // an IPv4 address
	KindAAAA                        // an IPv6 address
	KindCNAME                       // an alias: the answer goes on at Target
	KindNXDomain                    // the name does not exist
	KindServFail                    // every query for the name gets SERVFAIL
	KindRefused                     // every query for the name gets REFUSED
	KindDrop                        // every query for the name gets no reply
	KindNegativeTTL                 // a SOA with this negative TTL in negative answers
	KindRoundRobin                  // each answer carries N of the addresses, rotating
)

// Record is one fact about a name, given to Server.Set. Build one with A,
// AAAA, CNAME, NXDomain, ServFail, Refused, Drop, NegativeTTL or
// RoundRobin.
type Record struct {
	Kind   Kind
	Addr   netip.Addr // KindA, KindAAAA
	Target string     // KindCNAME
	TTL    uint32     // KindA, KindAAAA, KindCNAME, KindNegativeTTL: seconds
	N      int        // KindRoundRobin: addresses per answer
}

// A is an IPv4 address record; it panics if addr is not IPv4.
func A(addr string, ttl uint32) Record {
	a := netip.MustParseAddr(addr)
	if !a.Is4() {
		panic(fmt.Sprintf("dnstest.A(%q): not an IPv4 address", addr))
	}
	return Record{Kind: KindA, Addr: a, TTL: ttl}
}

// AAAA is an IPv6 address record; it panics if addr is not IPv6.
func AAAA(addr string, ttl uint32) Record {
	a := netip.MustParseAddr(addr)
	if !a.Is6() {
		panic(fmt.Sprintf("dnstest.AAAA(%q): not an IPv6 address", addr))
	}
	return Record{Kind: KindAAAA, Addr: a, TTL: ttl}
}

// CNAME makes the name an alias of target: answers carry the CNAME and
// then target's records (followed through further aliases), or
// NXDOMAIN if target has none set.
func CNAME(target string, ttl uint32) Record {
	return Record{Kind: KindCNAME, Target: target, TTL: ttl}
}

// NXDomain: the name does not exist (also what a name never Set gets).
func NXDomain() Record { return Record{Kind: KindNXDomain} }

// ServFail: queries for the name get SERVFAIL.
func ServFail() Record { return Record{Kind: KindServFail} }

// Refused: queries for the name get REFUSED.
func Refused() Record { return Record{Kind: KindRefused} }

// Drop: queries for the name get no reply; the client times out.
func Drop() Record { return Record{Kind: KindDrop} }

// NegativeTTL puts a SOA record in the authority section of the name's
// negative answers (NXDOMAIN, and NODATA for a type it has no record of),
// with ttl as both its TTL and its MINIMUM: the negative TTL (RFC 2308).
// Without it negative answers carry no SOA.
func NegativeTTL(ttl uint32) Record { return Record{Kind: KindNegativeTTL, TTL: ttl} }

// RoundRobin makes each answer carry only n of the name's addresses of
// the asked type, starting one further in the list at each query, as a
// round-robin server answering subsets does.
func RoundRobin(n int) Record { return Record{Kind: KindRoundRobin, N: n} }
