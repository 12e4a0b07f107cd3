package topology

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// forwardDialTimeout bounds Forward's connection to its target, which is on
// the same machine: a failure shows within it.
const forwardDialTimeout = 10 * time.Second

// Forward listens on the loopback of network namespace ns and relays every
// connection to target, dialled from the caller's own namespace: how a
// process inside a node's namespace (hostNetwork, as the agent runs) reaches
// a server the test runs on its own loopback, such as the API server. It
// returns the address it listens on and stops when the test ends.
func Forward(t testing.TB, ns, target string) string {
	t.Helper()
	var l net.Listener
	if err := InNetns(ns, func() error {
		var err error
		l, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
		wg    sync.WaitGroup
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			return false
		}
		conns[c] = true
		return true
	}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.DialTimeout("tcp", target, forwardDialTimeout)
			if err != nil {
				in.Close()
				continue
			}
			if !track(in) || !track(out) {
				in.Close()
				out.Close()
				return
			}
			wg.Add(2)
			relay := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				// One direction ended: end both, as a proxy does.
				dst.Close()
				src.Close()
			}
			go relay(out, in)
			go relay(in, out)
		}
	}()
	return l.Addr().String()
}

// HTTPClient is an HTTP client whose connections are made inside network
// namespace ns, e.g. to reach a node agent's /metrics on that namespace's
// loopback.
func HTTPClient(ns string) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var conn net.Conn
				err := InNetns(ns, func() error {
					var d net.Dialer
					var err error
					conn, err = d.DialContext(ctx, network, addr)
					return err
				})
				return conn, err
			},
		},
	}
}
