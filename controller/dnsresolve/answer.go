package dnsresolve

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// answer is what one reply says about one name and one type (A or AAAA).
type answer struct {
	// addrs are the addresses of the queried name, each with the least
	// TTL along the CNAME chain that led to it. Empty for a negative
	// answer.
	addrs []addrTTL
	// ttl is how long the answer as a whole holds: the least TTL of its
	// addresses, or for a negative answer the SOA's negative TTL
	// (RFC 2308: the lesser of the SOA record's TTL and its MINIMUM),
	// lowered by the CNAME chain's. unknownTTL for a negative answer
	// without a SOA.
	ttl time.Duration
	// negative: NXDOMAIN (the name does not exist) or NODATA (it has no
	// record of this type). An answer all the same.
	negative bool
	// nxdomain: the negative answer is NXDOMAIN.
	nxdomain bool
}

// addrTTL is an address with the TTL it came with.
type addrTTL struct {
	addr netip.Addr
	ttl  time.Duration
}

// unknownTTL marks a negative answer without a SOA record.
const unknownTTL time.Duration = -1

// errNotOurs: the message is not the reply to our query (another ID,
// question or no response bit). On UDP the wait goes on for the real one.
var errNotOurs = errors.New("not the reply to this query")

// errTruncated: the reply was truncated (TC bit); ask again over TCP.
var errTruncated = errors.New("reply truncated")

// rcodeError is a reply whose response code is neither success nor
// NXDOMAIN: SERVFAIL, REFUSED, FORMERR, NOTIMP and the rest.
type rcodeError struct{ rcode dnsmessage.RCode }

func (e rcodeError) Error() string {
	return "server answered " + strings.TrimPrefix(e.rcode.String(), "RCode")
}

// buildQuery packs a recursive query for q with the given ID.
func buildQuery(id uint16, q dnsmessage.Question) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 64), dnsmessage.Header{ID: id, RecursionDesired: true})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	return b.Finish()
}

// ttlOf converts a record's TTL; RFC 2181 §8: a TTL with the top bit set
// is taken as 0.
func ttlOf(ttl uint32) time.Duration {
	if ttl > math.MaxInt32 {
		return 0
	}
	return time.Duration(ttl) * time.Second
}

// sameName compares two DNS names without regard to case.
func sameName(a, b dnsmessage.Name) bool {
	return strings.EqualFold(a.String(), b.String())
}

// record is one answer-section record that parseAnswer follows.
type record struct {
	owner  string // lower case, absolute
	ttl    time.Duration
	addr   netip.Addr // A or AAAA
	target string     // CNAME, lower case, absolute
}

// parseAnswer reads the reply msg to the query with the given ID and
// question. It follows the CNAME chain from the question's name through
// the answer section: the addresses of the question's type owned by the
// chain's last name are the answer, each with the least TTL along the
// chain. It never panics, whatever msg holds (FuzzParseAnswer).
func parseAnswer(msg []byte, id uint16, q dnsmessage.Question) (answer, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return answer{}, fmt.Errorf("malformed reply: %w", err)
	}
	if !h.Response || h.ID != id {
		return answer{}, errNotOurs
	}
	questions, err := p.AllQuestions()
	if err != nil {
		return answer{}, fmt.Errorf("malformed reply: %w", err)
	}
	// A server may leave out the question in an error reply (FORMERR).
	if len(questions) == 0 && h.RCode != dnsmessage.RCodeSuccess && h.RCode != dnsmessage.RCodeNameError {
		return answer{}, rcodeError{h.RCode}
	}
	if len(questions) != 1 || questions[0].Type != q.Type || questions[0].Class != q.Class || !sameName(questions[0].Name, q.Name) {
		return answer{}, errNotOurs
	}
	if h.Truncated {
		return answer{}, errTruncated
	}
	if h.RCode != dnsmessage.RCodeSuccess && h.RCode != dnsmessage.RCodeNameError {
		return answer{}, rcodeError{h.RCode}
	}

	records, err := answerRecords(&p, q.Type)
	if err != nil {
		return answer{}, err
	}
	current, chainTTL := followCNAMEs(records, strings.ToLower(q.Name.String()))
	var addrs []addrTTL
	for _, rec := range records {
		if rec.owner == current && rec.addr.IsValid() {
			addrs = append(addrs, addrTTL{addr: rec.addr, ttl: min(rec.ttl, chainTTL)})
		}
	}

	if h.RCode == dnsmessage.RCodeSuccess && len(addrs) > 0 {
		ans := answer{addrs: addrs, ttl: addrs[0].ttl}
		for _, a := range addrs[1:] {
			ans.ttl = min(ans.ttl, a.ttl)
		}
		return ans, nil
	}

	ttl, err := negativeTTL(&p, chainTTL)
	if err != nil {
		return answer{}, err
	}
	return answer{negative: true, nxdomain: h.RCode == dnsmessage.RCodeNameError, ttl: ttl}, nil
}

// answerRecords reads the answer section at p: the addresses of qtype and
// the CNAMEs, of class IN; every other record is skipped.
func answerRecords(p *dnsmessage.Parser, qtype dnsmessage.Type) ([]record, error) {
	var records []record
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return records, nil
		}
		if err != nil {
			return nil, fmt.Errorf("malformed answer section: %w", err)
		}
		rec := record{owner: strings.ToLower(rh.Name.String()), ttl: ttlOf(rh.TTL)}
		switch {
		case rh.Class != dnsmessage.ClassINET:
			err = p.SkipAnswer()
		case rh.Type == dnsmessage.TypeA && qtype == dnsmessage.TypeA:
			var body dnsmessage.AResource
			if body, err = p.AResource(); err == nil {
				rec.addr = netip.AddrFrom4(body.A)
				records = append(records, rec)
			}
		case rh.Type == dnsmessage.TypeAAAA && qtype == dnsmessage.TypeAAAA:
			var body dnsmessage.AAAAResource
			if body, err = p.AAAAResource(); err == nil {
				rec.addr = netip.AddrFrom16(body.AAAA)
				records = append(records, rec)
			}
		case rh.Type == dnsmessage.TypeCNAME:
			var body dnsmessage.CNAMEResource
			if body, err = p.CNAMEResource(); err == nil {
				rec.target = strings.ToLower(body.CNAME.String())
				records = append(records, rec)
			}
		default:
			err = p.SkipAnswer()
		}
		if err != nil {
			return nil, fmt.Errorf("malformed answer section: %w", err)
		}
	}
}

// followCNAMEs follows the chain from name: each step is a CNAME owned by
// the current name. A name with a CNAME has no other data (RFC 1034
// §3.6.2), so addresses count only at the name the chain ends on, which it
// returns with the least TTL along the chain. A chain longer than the
// records (a loop) ends where it stands, with no address.
func followCNAMEs(records []record, name string) (string, time.Duration) {
	current := name
	chainTTL := time.Duration(math.MaxInt64)
	for range len(records) + 1 {
		next := ""
		for _, rec := range records {
			if rec.owner == current && rec.target != "" {
				next, chainTTL = rec.target, min(chainTTL, rec.ttl)
				break
			}
		}
		if next == "" {
			break
		}
		current = next
	}
	return current, chainTTL
}

// negativeTTL is how long a negative answer holds, from the authority
// section at p: the least of each SOA's TTL and minimum, and of chainTTL;
// unknownTTL without an SOA.
func negativeTTL(p *dnsmessage.Parser, chainTTL time.Duration) (time.Duration, error) {
	ttl := unknownTTL
	for {
		rh, err := p.AuthorityHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return ttl, nil
		}
		if err != nil {
			return 0, fmt.Errorf("malformed authority section: %w", err)
		}
		if rh.Type != dnsmessage.TypeSOA || rh.Class != dnsmessage.ClassINET {
			if err := p.SkipAuthority(); err != nil {
				return 0, fmt.Errorf("malformed authority section: %w", err)
			}
			continue
		}
		soa, err := p.SOAResource()
		if err != nil {
			return 0, fmt.Errorf("malformed authority section: %w", err)
		}
		if t := min(ttlOf(rh.TTL), ttlOf(soa.MinTTL), chainTTL); ttl == unknownTTL || t < ttl {
			ttl = t
		}
	}
}
