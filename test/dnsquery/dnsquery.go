// Package dnsquery builds the DNS queries the tests' pods send and reads
// the answers they get: one A question, and the first A record of the
// reply. The test binaries and the pods' testapp share it.
package dnsquery

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/net/dns/dnsmessage"
)

// A is a DNS query with id for name's A records.
func A(id uint16, name string) ([]byte, error) {
	qname, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: qname, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		return nil, err
	}
	return b.Finish()
}

// FirstA returns a DNS reply's first A record and its ID.
func FirstA(reply []byte) (netip.Addr, uint16, error) {
	var p dnsmessage.Parser
	h, err := p.Start(reply)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	if !h.Response {
		return netip.Addr{}, 0, errors.New("not a reply")
	}
	if err := p.SkipAllQuestions(); err != nil {
		return netip.Addr{}, h.ID, err
	}
	for {
		ah, err := p.AnswerHeader()
		if err != nil {
			return netip.Addr{}, h.ID, fmt.Errorf("no A record (rcode %v): %w", h.RCode, err)
		}
		if ah.Type != dnsmessage.TypeA {
			if err := p.SkipAnswer(); err != nil {
				return netip.Addr{}, h.ID, err
			}
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return netip.Addr{}, h.ID, err
		}
		return netip.AddrFrom4(a.A), h.ID, nil
	}
}
