package dnsresolve

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/net/dns/dnsmessage"
)

// LearnFrame learns from a DNS reply a pod received: frame is the packet
// from its Ethernet header (an 802.1Q tag allowed), IPv4 or IPv6, UDP or
// TCP from port 53, as Open vSwitch hands it to the agent (TableFirewall's
// snoop flows). A TCP segment is added to its stream (TCPReplies), and the
// replies it completes are learned. For the
// reply's question, if it asks for A or AAAA and the answer is positive,
// the addresses at the end of its CNAME chain are learned under the asked
// name (Learn: under the exact name and the wildcard covering it, each if
// wanted), with the least TTL of the chain. It returns how many addresses
// it learned, and an error for a frame that is not such a reply; a
// negative answer or another question type learns nothing, and is no
// error.
//
// This is how a wildcard rule fills, and how a name's new address is
// known as soon as the pod knows it rather than at the resolver's next
// lookup. It never panics, whatever the frame holds (FuzzLearnFrame).
func (r *Resolver) LearnFrame(frame []byte) (int, error) {
	if isTCP(frame) {
		messages, err := r.tcp.Add(frame)
		learned := 0
		for _, m := range messages {
			n, mErr := r.LearnMessage(m)
			learned += n
			err = errors.Join(err, mErr)
		}
		return learned, err
	}
	payload, err := udpPayloadFromPort53(frame)
	if err != nil {
		return 0, err
	}
	return r.LearnMessage(payload)
}

// isTCP reports whether frame's IP packet carries TCP (as far as its
// headers can be read; transportOf checks them in full).
func isTCP(frame []byte) bool {
	_, _, err := transportOf(frame, protocolTCP)
	return err == nil
}

// LearnMessage learns from one DNS reply message, its bytes without the
// transport's framing: a UDP payload, or a message TCPReplies took out of
// a TCP stream. As LearnFrame, it returns how many addresses it learned.
func (r *Resolver) LearnMessage(payload []byte) (int, error) {
	var p dnsmessage.Parser
	h, err := p.Start(payload)
	if err != nil {
		return 0, fmt.Errorf("DNS header: %w", err)
	}
	if !h.Response {
		return 0, errors.New("a DNS query, not a reply")
	}
	q, err := p.Question()
	if err != nil {
		return 0, fmt.Errorf("DNS question: %w", err)
	}
	if q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeAAAA {
		return 0, nil
	}
	ans, err := parseAnswer(payload, h.ID, q)
	if err != nil {
		var rcode rcodeError
		if errors.As(err, &rcode) || errors.Is(err, errTruncated) {
			return 0, nil // nothing to learn: no error of the frame's
		}
		return 0, err
	}
	if ans.negative || len(ans.addrs) == 0 {
		return 0, nil
	}
	addrs := make([]netip.Addr, 0, len(ans.addrs))
	for _, a := range ans.addrs {
		addrs = append(addrs, a.addr)
	}
	r.Learn(q.Name.String(), addrs, ans.ttl)
	return len(addrs), nil
}

// Header sizes and protocol numbers LearnFrame reads.
const (
	ethernetHeaderLen = 14
	vlanTagLen        = 4
	udpHeaderLen      = 8
	ipv4MinHeaderLen  = 20
	ipv6HeaderLen     = 40
	etherTypeIPv4     = 0x0800
	etherTypeIPv6     = 0x86dd
	etherTypeVLAN     = 0x8100
	protocolUDP       = 17
	protocolTCP       = 6
	dnsPort           = 53
)

// udpPayloadFromPort53 returns the UDP payload of an Ethernet frame that
// carries a datagram from port 53 in IPv4 (not a later fragment) or IPv6
// (UDP as the first next header).
func udpPayloadFromPort53(frame []byte) ([]byte, error) {
	_, udp, err := transportOf(frame, protocolUDP)
	if err != nil {
		return nil, err
	}
	if len(udp) < udpHeaderLen {
		return nil, errors.New("truncated UDP header")
	}
	if port := binary.BigEndian.Uint16(udp); port != dnsPort {
		return nil, fmt.Errorf("UDP from port %d, not %d", port, dnsPort)
	}
	length := int(binary.BigEndian.Uint16(udp[4:]))
	if length < udpHeaderLen || length > len(udp) {
		return nil, fmt.Errorf("UDP length %d in %d bytes", length, len(udp))
	}
	return udp[udpHeaderLen:length], nil
}

// ipPair is a packet's source and destination addresses.
type ipPair struct{ src, dst netip.Addr }

// transportOf returns the addresses of an Ethernet frame's IPv4 (not a
// later fragment) or IPv6 packet and its transport segment, which must be
// of protocol (the IPv6 first next header).
func transportOf(frame []byte, protocol uint8) (ipPair, []byte, error) {
	if len(frame) < ethernetHeaderLen {
		return ipPair{}, nil, errors.New("frame shorter than an Ethernet header")
	}
	etherType, rest := binary.BigEndian.Uint16(frame[12:]), frame[ethernetHeaderLen:]
	if etherType == etherTypeVLAN {
		if len(rest) < vlanTagLen {
			return ipPair{}, nil, errors.New("truncated 802.1Q tag")
		}
		etherType, rest = binary.BigEndian.Uint16(rest[2:]), rest[vlanTagLen:]
	}
	switch etherType {
	case etherTypeIPv4:
		if len(rest) < ipv4MinHeaderLen || rest[0]>>4 != 4 {
			return ipPair{}, nil, errors.New("not an IPv4 header")
		}
		ihl := int(rest[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(rest[2:]))
		if ihl < ipv4MinHeaderLen || total < ihl || total > len(rest) {
			return ipPair{}, nil, fmt.Errorf("IPv4 header length %d, total length %d, in %d bytes", ihl, total, len(rest))
		}
		if binary.BigEndian.Uint16(rest[6:])&0x1fff != 0 {
			return ipPair{}, nil, errors.New("a later IPv4 fragment")
		}
		if rest[9] != protocol {
			return ipPair{}, nil, fmt.Errorf("IPv4 protocol %d, not %d", rest[9], protocol)
		}
		pair := ipPair{netip.AddrFrom4([4]byte(rest[12:16])), netip.AddrFrom4([4]byte(rest[16:20]))}
		return pair, rest[ihl:total], nil
	case etherTypeIPv6:
		if len(rest) < ipv6HeaderLen || rest[0]>>4 != 6 {
			return ipPair{}, nil, errors.New("not an IPv6 header")
		}
		if rest[6] != protocol {
			return ipPair{}, nil, fmt.Errorf("IPv6 next header %d, not %d", rest[6], protocol)
		}
		payloadLen := int(binary.BigEndian.Uint16(rest[4:]))
		if ipv6HeaderLen+payloadLen > len(rest) {
			return ipPair{}, nil, fmt.Errorf("IPv6 payload length %d in %d bytes", payloadLen, len(rest)-ipv6HeaderLen)
		}
		pair := ipPair{netip.AddrFrom16([16]byte(rest[8:24])), netip.AddrFrom16([16]byte(rest[24:40]))}
		return pair, rest[ipv6HeaderLen : ipv6HeaderLen+payloadLen], nil
	default:
		return ipPair{}, nil, fmt.Errorf("EtherType 0x%04x is neither IPv4 nor IPv6", etherType)
	}
}
