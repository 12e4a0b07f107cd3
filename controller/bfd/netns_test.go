package bfd

import (
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/topology"
)

// listenIn starts an Engine in namespace ns, closed when the test ends;
// changes collects what its callback was handed.
func listenIn(t testing.TB, ns string, cfg Config) (*Engine, *changes) {
	t.Helper()
	c := &changes{}
	var e *Engine
	err := topology.InNetns(ns, func() error {
		var err error
		e, err = Listen(cfg, c.record)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, c
}

// addIn adds sessions from inside ns, where their sockets must live.
func addIn(t testing.TB, ns string, e *Engine, peers ...netip.Addr) {
	t.Helper()
	err := topology.InNetns(ns, func() error {
		for _, p := range peers {
			if err := e.Add(p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type changes struct {
	mu  sync.Mutex
	all []timedChange
}

type timedChange struct {
	Change
	at time.Time
}

func (c *changes) record(ch Change) {
	c.mu.Lock()
	c.all = append(c.all, timedChange{ch, time.Now()})
	c.mu.Unlock()
}

// last returns the last change reported for peer.
func (c *changes) last(peer netip.Addr) (timedChange, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.all) - 1; i >= 0; i-- {
		if c.all[i].Peer == peer {
			return c.all[i], true
		}
	}
	return timedChange{}, false
}

// sessionSetUp bounds how long two systems take to bring a session Up:
// two or three packets at the slow 1 s interval that a session not Up
// uses, with their jitter.
const sessionSetUp = 10 * time.Second

// waitState waits until the session to peer is in want; a bound, not a
// measurement.
func waitState(t testing.TB, e *Engine, peer netip.Addr, want State, within time.Duration) Diag {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, d, ok := e.State(peer)
		if ok && st == want {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("session to %s is %v (%v, exists %v) after %v, want %v", peer, st, d, ok, within, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
