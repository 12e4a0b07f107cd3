package dnstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// goResolver asks s with the standard library's own DNS client, an
// independent check of the server's replies.
func goResolver(s *Server) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, s.Addr().String())
	}}
}

func start(t *testing.T, addr string) *Server {
	t.Helper()
	s, err := Start(addr)
	if err != nil {
		t.Fatalf("Start(%s): %v", addr, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func lookup(t *testing.T, s *Server, network, name string) ([]netip.Addr, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got, err := goResolver(s).LookupNetIP(ctx, network, name)
	slices.SortFunc(got, netip.Addr.Compare)
	return got, err
}

// TestServerAnswers: A, AAAA and CNAME answers, NXDOMAIN, SERVFAIL and
// silence, as the standard library's client sees them, over IPv4 and IPv6
// loopback.
func TestServerAnswers(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			s := start(t, addr) // fails, rather than skip, without IPv6 loopback (CI has one)
			if s.Addr().Port() == 0 || !s.Addr().Addr().IsLoopback() {
				t.Fatalf("Addr() = %v", s.Addr())
			}
			s.Set("Host.Example.com.", A("192.0.2.1", 60), AAAA("2001:db8::1", 60))
			s.Set("www.example.com", CNAME("host.example.com", 60))
			s.Set("broken.example.com", ServFail())
			s.Set("silent.example.com", Drop())

			got, err := lookup(t, s, "ip", "www.example.com.")
			if want := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}; err != nil || !slices.Equal(got, want) {
				t.Errorf("www.example.com: %v, %v; want %v", got, err, want)
			}
			cname, err := goResolver(s).LookupCNAME(context.Background(), "www.example.com.")
			if err != nil || cname != "host.example.com." {
				t.Errorf("LookupCNAME: %q, %v", cname, err)
			}
			if n := s.Queries("WWW.example.com."); n < 2 {
				t.Errorf("Queries(www.example.com) = %d, want at least 2", n)
			}
			if n := s.Queries("host.example.com"); n != 0 {
				t.Errorf("the CNAME's target was asked %d times; the answer carries it", n)
			}

			_, err = lookup(t, s, "ip4", "missing.example.com.")
			var dnsErr *net.DNSError
			if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
				t.Errorf("missing.example.com: %v, want not found", err)
			}
			if _, err := lookup(t, s, "ip4", "broken.example.com."); err == nil || errors.As(err, &dnsErr) && dnsErr.IsNotFound {
				t.Errorf("broken.example.com: %v, want a server failure", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if _, err := goResolver(s).LookupNetIP(ctx, "ip4", "silent.example.com."); err == nil {
				t.Errorf("silent.example.com answered")
			}
			if n := s.Queries("silent.example.com"); n == 0 {
				t.Errorf("dropped queries not counted")
			}

			s.Set("host.example.com", A("192.0.2.2", 60))
			if got, err := lookup(t, s, "ip", "host.example.com."); err != nil || !slices.Equal(got, []netip.Addr{netip.MustParseAddr("192.0.2.2")}) {
				t.Errorf("after Set: %v, %v", got, err)
			}
		})
	}
}

// TestServerTruncatesOverUDP: an answer over 512 bytes is truncated on
// UDP and whole over TCP.
func TestServerTruncatesOverUDP(t *testing.T) {
	s := start(t, "127.0.0.1:0")
	var records []Record
	for i := 1; i <= 60; i++ {
		records = append(records, A(fmt.Sprintf("198.51.100.%d", i), 60))
	}
	s.Set("big.example.com", records...)
	got, err := lookup(t, s, "ip4", "big.example.com.")
	if err != nil || len(got) != 60 {
		t.Fatalf("big.example.com: %d addresses, %v; want 60", len(got), err)
	}
	if n := s.TCPQueries("big.example.com"); n == 0 {
		t.Errorf("no query over TCP")
	}
	s.Set("small.example.com", A("198.51.100.1", 60))
	if _, err := lookup(t, s, "ip4", "small.example.com."); err != nil {
		t.Fatal(err)
	}
	if n := s.TCPQueries("small.example.com"); n != 0 {
		t.Errorf("a small answer went over TCP %d times", n)
	}
}

// TestServerRoundRobin: each answer carries N addresses, one further on
// each time.
func TestServerRoundRobin(t *testing.T) {
	s := start(t, "127.0.0.1:0")
	s.Set("rr.example.com", A("203.0.113.1", 30), A("203.0.113.2", 30), A("203.0.113.3", 30), RoundRobin(2))
	var answers []string
	for range 4 {
		got, err := lookup(t, s, "ip4", "rr.example.com.")
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, fmt.Sprint(got))
	}
	want := []string{"[203.0.113.1 203.0.113.2]", "[203.0.113.2 203.0.113.3]", "[203.0.113.1 203.0.113.3]", "[203.0.113.1 203.0.113.2]"}
	if !slices.Equal(answers, want) {
		t.Errorf("answers %v, want %v", answers, want)
	}
}

// TestServerClose: Close stops both listeners; the port answers no more.
func TestServerClose(t *testing.T) {
	s, err := Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Set("a.example.com", A("192.0.2.1", 60))
	if _, err := lookup(t, s, "ip4", "a.example.com."); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", s.Addr().String(), time.Second)
	if err == nil {
		conn.Close()
		t.Errorf("TCP still accepts after Close")
	}
}
