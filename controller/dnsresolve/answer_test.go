package dnsresolve

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// rr is a record for building test replies: an address (a), an alias
// (cname) or a SOA (soaMin set).
type rr struct {
	name   string
	ttl    uint32
	a      string
	cname  string
	soaMin uint32
	class  dnsmessage.Class
}

func question(name string, t dnsmessage.Type) dnsmessage.Question {
	return dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: t, Class: dnsmessage.ClassINET}
}

// buildReply packs a reply with header h, questions qs and the records.
func buildReply(t testing.TB, h dnsmessage.Header, qs []dnsmessage.Question, answers, authority []rr) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, h)
	b.EnableCompression()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.StartQuestions())
	for _, q := range qs {
		must(b.Question(q))
	}
	add := func(r rr) {
		hdr := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(r.name), Class: dnsmessage.ClassINET, TTL: r.ttl}
		if r.class != 0 {
			hdr.Class = r.class
		}
		switch {
		case r.cname != "":
			must(b.CNAMEResource(hdr, dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(r.cname)}))
		case r.a != "":
			a := netip.MustParseAddr(r.a)
			if a.Is4() {
				must(b.AResource(hdr, dnsmessage.AResource{A: a.As4()}))
			} else {
				must(b.AAAAResource(hdr, dnsmessage.AAAAResource{AAAA: a.As16()}))
			}
		default:
			must(b.SOAResource(hdr, dnsmessage.SOAResource{
				NS: dnsmessage.MustNewName("ns.example."), MBox: dnsmessage.MustNewName("hm.example."), MinTTL: r.soaMin,
			}))
		}
	}
	must(b.StartAnswers())
	for _, r := range answers {
		add(r)
	}
	must(b.StartAuthorities())
	for _, r := range authority {
		add(r)
	}
	msg, err := b.Finish()
	must(err)
	return msg
}

// TestParseAnswer: what parseAnswer makes of replies, good and bad.
func TestParseAnswer(t *testing.T) {
	const id = 0x1234
	qA := question("www.example.com.", dnsmessage.TypeA)
	qAAAA := question("www.example.com.", dnsmessage.TypeAAAA)
	ok := dnsmessage.Header{ID: id, Response: true}
	type want struct {
		addrs    map[string]time.Duration
		ttl      time.Duration
		negative bool
		nxdomain bool
		err      error // matched with errors.Is, or any error when errAny
		errAny   bool
	}
	s := time.Second
	for _, tc := range []struct {
		name string
		q    dnsmessage.Question
		msg  []byte
		want want
	}{
		{
			name: "addresses, case-insensitive owner; other owners and types ignored",
			q:    qA,
			msg: buildReply(t, ok, []dnsmessage.Question{question("WWW.Example.COM.", dnsmessage.TypeA)}, []rr{
				{name: "Www.EXAMPLE.com.", ttl: 60, a: "192.0.2.1"},
				{name: "www.example.com.", ttl: 30, a: "192.0.2.2"},
				{name: "other.example.com.", ttl: 60, a: "192.0.2.99"},
				{name: "www.example.com.", ttl: 60, a: "2001:db8::1"}, // AAAA in an A answer
				{name: "www.example.com.", ttl: 60, a: "192.0.2.3", class: dnsmessage.ClassCHAOS},
			}, nil),
			want: want{addrs: map[string]time.Duration{"192.0.2.1": 60 * s, "192.0.2.2": 30 * s}, ttl: 30 * s},
		},
		{
			name: "CNAME chain, out of order: the least TTL on the chain",
			q:    qAAAA,
			msg: buildReply(t, ok, []dnsmessage.Question{qAAAA}, []rr{
				{name: "edge.cdn.test.", ttl: 300, a: "2001:db8::7"},
				{name: "alias.cdn.test.", ttl: 100, cname: "edge.cdn.test."},
				{name: "www.example.com.", ttl: 200, cname: "alias.cdn.test."},
				{name: "alias.cdn.test.", ttl: 300, a: "2001:db8::99"}, // owned by a middle name: not ours
			}, nil),
			want: want{addrs: map[string]time.Duration{"2001:db8::7": 100 * s}, ttl: 100 * s},
		},
		{
			name: "CNAME loop: no address, NODATA",
			q:    qA,
			msg: buildReply(t, ok, []dnsmessage.Question{qA}, []rr{
				{name: "www.example.com.", ttl: 10, cname: "b.example.com."},
				{name: "b.example.com.", ttl: 10, cname: "www.example.com."},
			}, nil),
			want: want{negative: true, ttl: unknownTTL},
		},
		{
			name: "NXDOMAIN with SOA: the lesser of its TTL and MINIMUM",
			q:    qA,
			msg: buildReply(t, dnsmessage.Header{ID: id, Response: true, RCode: dnsmessage.RCodeNameError},
				[]dnsmessage.Question{qA}, nil, []rr{{name: "example.com.", ttl: 900, soaMin: 300}}),
			want: want{negative: true, nxdomain: true, ttl: 300 * s},
		},
		{
			name: "NODATA with SOA whose TTL is the lesser",
			q:    qAAAA,
			msg:  buildReply(t, ok, []dnsmessage.Question{qAAAA}, nil, []rr{{name: "example.com.", ttl: 60, soaMin: 3600}}),
			want: want{negative: true, ttl: 60 * s},
		},
		{
			name: "NODATA through a CNAME: the chain's TTL lowers the SOA's",
			q:    qA,
			msg: buildReply(t, ok, []dnsmessage.Question{qA},
				[]rr{{name: "www.example.com.", ttl: 20, cname: "x.example.net."}},
				[]rr{{name: "example.net.", ttl: 600, soaMin: 600}}),
			want: want{negative: true, ttl: 20 * s},
		},
		{
			name: "NODATA without SOA",
			q:    qA,
			msg:  buildReply(t, ok, []dnsmessage.Question{qA}, nil, nil),
			want: want{negative: true, ttl: unknownTTL},
		},
		{
			name: "a TTL with the top bit set counts as 0 (RFC 2181)",
			q:    qA,
			msg:  buildReply(t, ok, []dnsmessage.Question{qA}, []rr{{name: "www.example.com.", ttl: 1 << 31, a: "192.0.2.1"}}, nil),
			want: want{addrs: map[string]time.Duration{"192.0.2.1": 0}, ttl: 0},
		},
		{
			name: "another ID",
			q:    qA,
			msg:  buildReply(t, dnsmessage.Header{ID: id + 1, Response: true}, []dnsmessage.Question{qA}, nil, nil),
			want: want{err: errNotOurs},
		},
		{
			name: "not a response",
			q:    qA,
			msg:  buildReply(t, dnsmessage.Header{ID: id}, []dnsmessage.Question{qA}, nil, nil),
			want: want{err: errNotOurs},
		},
		{
			name: "another question",
			q:    qA,
			msg:  buildReply(t, ok, []dnsmessage.Question{qAAAA}, nil, nil),
			want: want{err: errNotOurs},
		},
		{
			name: "truncated",
			q:    qA,
			msg:  buildReply(t, dnsmessage.Header{ID: id, Response: true, Truncated: true}, []dnsmessage.Question{qA}, nil, nil),
			want: want{err: errTruncated},
		},
		{
			name: "SERVFAIL",
			q:    qA,
			msg:  buildReply(t, dnsmessage.Header{ID: id, Response: true, RCode: dnsmessage.RCodeServerFailure}, []dnsmessage.Question{qA}, nil, nil),
			want: want{err: rcodeError{dnsmessage.RCodeServerFailure}},
		},
		{
			name: "FORMERR without the question",
			q:    qA,
			msg:  buildReply(t, dnsmessage.Header{ID: id, Response: true, RCode: dnsmessage.RCodeFormatError}, nil, nil, nil),
			want: want{err: rcodeError{dnsmessage.RCodeFormatError}},
		},
		{
			name: "cut short",
			q:    qA,
			msg:  buildReply(t, ok, []dnsmessage.Question{qA}, []rr{{name: "www.example.com.", ttl: 1, a: "192.0.2.1"}}, nil)[:40],
			want: want{errAny: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAnswer(tc.msg, id, tc.q)
			switch {
			case tc.want.errAny:
				if err == nil {
					t.Fatalf("no error; got %+v", got)
				}
				return
			case tc.want.err != nil:
				if !errors.Is(err, tc.want.err) {
					t.Fatalf("error %v, want %v", err, tc.want.err)
				}
				return
			case err != nil:
				t.Fatalf("error %v", err)
			}
			gotAddrs := map[string]time.Duration{}
			for _, a := range got.addrs {
				gotAddrs[a.addr.String()] = a.ttl
			}
			if len(gotAddrs) != len(tc.want.addrs) {
				t.Errorf("addresses %v, want %v", gotAddrs, tc.want.addrs)
			}
			for a, ttl := range tc.want.addrs {
				if g, ok := gotAddrs[a]; !ok || g != ttl {
					t.Errorf("address %s: TTL %v (present %v), want %v", a, g, ok, ttl)
				}
			}
			if got.ttl != tc.want.ttl || got.negative != tc.want.negative || got.nxdomain != tc.want.nxdomain {
				t.Errorf("ttl %v negative %v nxdomain %v, want %v %v %v",
					got.ttl, got.negative, got.nxdomain, tc.want.ttl, tc.want.negative, tc.want.nxdomain)
			}
		})
	}
}

// TestRcodeErrorMessage: errors name the code as DNS people say it.
func TestRcodeErrorMessage(t *testing.T) {
	if got := (rcodeError{dnsmessage.RCodeServerFailure}).Error(); got != "server answered ServerFailure" {
		t.Errorf("got %q", got)
	}
}

// FuzzParseAnswer: whatever the bytes, parseAnswer does not panic, and an
// answer it returns is consistent: addresses of the asked family only,
// none in a negative answer, TTLs not negative.
func FuzzParseAnswer(f *testing.F) {
	q := question("www.example.com.", dnsmessage.TypeA)
	ok := dnsmessage.Header{ID: 7, Response: true}
	f.Add(buildReply(f, ok, []dnsmessage.Question{q}, []rr{
		{name: "www.example.com.", ttl: 200, cname: "a.cdn.test."},
		{name: "a.cdn.test.", ttl: 60, a: "192.0.2.1"},
	}, nil))
	f.Add(buildReply(f, dnsmessage.Header{ID: 7, Response: true, RCode: dnsmessage.RCodeNameError},
		[]dnsmessage.Question{q}, nil, []rr{{name: "example.com.", ttl: 900, soaMin: 300}}))
	f.Add(buildReply(f, ok, []dnsmessage.Question{q}, []rr{{name: "www.example.com.", ttl: 5, cname: "www.example.com."}}, nil))
	f.Add([]byte{})
	f.Add([]byte{0, 7, 0x80, 0, 0, 1, 0, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		for _, qt := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
			q.Type = qt
			ans, err := parseAnswer(msg, 7, q)
			if err != nil {
				continue
			}
			if ans.negative != (len(ans.addrs) == 0) {
				t.Fatalf("negative %v with %d addresses", ans.negative, len(ans.addrs))
			}
			if ans.ttl < 0 && !(ans.negative && ans.ttl == unknownTTL) {
				t.Fatalf("answer TTL %v", ans.ttl)
			}
			for _, a := range ans.addrs {
				if !a.addr.IsValid() || a.addr.Is4() != (qt == dnsmessage.TypeA) || a.ttl < 0 || a.ttl < ans.ttl {
					t.Fatalf("address %v TTL %v in an answer of type %v, TTL %v", a.addr, a.ttl, qt, ans.ttl)
				}
			}
			if slices.ContainsFunc(ans.addrs, func(a addrTTL) bool { return a.ttl > 1<<31*time.Second }) {
				t.Fatalf("TTL beyond 2^31 s")
			}
		}
	})
}
