package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/ofconn"
)

// snoopConfigTimeout bounds the configuration exchange on each (re)connection
// of the snoop connection: a local switch answers in milliseconds; longer
// only delays noticing a wedged one.
const snoopConfigTimeout = 5 * time.Second

// DefaultDNSHoldTimeout bounds how long a paused DNS reply waits for the
// flows of what it taught: a sync takes milliseconds (make bench-firewall
// measures the hold), so the bound is reached only when the agent cannot
// program its bridge. Then the reply goes on all the same, counted as a
// timeout: a pod never loses an answer to the agent, at the cost of the
// window the hold exists to close. Shorter releases sooner on a sick
// agent; longer delays the pod's lookups longer, and a resolver's own
// timeout (often 1–5 s) would then ask again.
const DefaultDNSHoldTimeout = time.Second

// resumeTimeout bounds sending one resumption to the local switch.
const resumeTimeout = 2 * time.Second

// DNSHold is what SnoopDNS needs to hold each paused DNS reply until the
// bridge holds the flows for what it taught.
type DNSHold struct {
	// Learn learns a reply's addresses (dnsresolve.Resolver.LearnFrame).
	Learn func(frame []byte) (int, error)
	// Generation is the resolver's generation after learning
	// (dnsresolve.Resolver.Generation).
	Generation func() uint64
	// Applied returns once the bridge holds the flows of the resolver's
	// answers up to a generation (Agent.WaitDNSApplied).
	Applied func(ctx context.Context, generation uint64) error
	// NamesSet, if set, is closed once the resolver knows the names it
	// learns (Agent.DNSNamesSet): a starting agent's snoop connection
	// takes the paused replies before its first sync has told the
	// resolver which names the firewalls need, and until then a reply
	// teaches nothing and would go on at once, without the flows for its
	// addresses. Such a reply waits for the names, within the hold's
	// bound, and is learned again.
	NamesSet <-chan struct{}
	// Timeout bounds each hold (DefaultDNSHoldTimeout when 0).
	Timeout time.Duration
	// Metrics counts the holds (nil: not counted).
	Metrics *Metrics
	// Ready, if set, is called once, when the connection first takes the
	// paused replies: start the agent's syncs after it, so that no reply
	// its flows pause finds no one to resume it.
	Ready func()
	// ReleaseOnStop: a reply still held when ctx ends (the agent stops
	// before the flows for its addresses are in) goes on without them,
	// as --dns-replies-while-away=pass lets replies through while no
	// agent is there. Without it such a reply is dropped, as the replies
	// paused while no agent is there are: the pod's resolver asks again,
	// and the next agent holds the answer until its flows are in place.
	// Letting it go on would hand the pod an address the firewall cannot
	// judge yet, the window the hold closes.
	ReleaseOnStop bool
}

// SnoopDNS keeps the agent's second OpenFlow connection to the bridge at
// target (its .mgmt socket), the one Open vSwitch sends packet-ins on,
// until ctx ends. TableFirewall's snoop flows (dataplane.KindFirewallSnoop)
// pause each DNS reply to the pods of namespaces with a dnsName rule and
// send it to this connection; each is learned (so that a name's addresses
// are known as soon as the pod has them, and wildcard rules fill at all),
// and resumed once the flows for its addresses are in the bridge: the pod
// gets the answer only when the firewall can judge the connection it
// opens with it. A reply that taught nothing new goes on at once.
//
// A connection of its own: a service connection gets no asynchronous
// message until it sets a nonzero miss_send_len (ovs-ofctl(8), monitor), so
// the agent's main connection, which never does, stays free of them. On
// each connection SnoopDNS sets it, keeping the switch's fragment handling
// as it reads it (that flag is the bridge's, not the connection's), and
// asks for NXT_PACKET_IN2, the only packet-in format that carries the
// continuation a paused packet needs.
func SnoopDNS(ctx context.Context, target string, hold DNSHold, opts ...ofconn.Option) error {
	if hold.Timeout <= 0 {
		hold.Timeout = DefaultDNSHoldTimeout
	}
	var current atomic.Pointer[ofconn.Client]
	handle := func(_ openflow.Header, m openflow.Message) {
		switch pi := m.(type) {
		case *openflow.PacketIn2:
			if !isSnoop(pi.Cookie) {
				return
			}
			unnamed := !closed(hold.NamesSet)
			learn(hold, pi.Data)
			if pi.Paused {
				// Handlers must not block the connection's reader.
				go holdReply(ctx, current.Load(), hold, pi, hold.Generation(), unnamed, time.Now())
			}
		case *openflow.PacketIn:
			// A copy (before the connection asked for NXT_PACKET_IN2, or
			// from a predecessor's copying flows): learn it.
			if isSnoop(pi.Cookie) {
				learn(hold, pi.Data)
			}
		}
	}
	client, err := ofconn.Dial(ctx, target, append(opts, ofconn.WithUnsolicited(handle))...)
	if err != nil {
		return fmt.Errorf("DNS snoop connection to %s: %w", target, err)
	}
	current.Store(client)
	defer client.Close()
	ready := hold.Ready
	for {
		err := askForPacketIns(ctx, client)
		switch {
		case err != nil && ctx.Err() == nil:
			klog.ErrorS(err, "Could not ask the bridge for DNS replies; retrying on reconnection", "target", target)
		case err == nil && ready != nil:
			ready()
			ready = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-client.Reconnected():
		}
	}
}

// closed reports whether ch is closed; a nil ch is (no wait).
func closed(ch <-chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func isSnoop(cookie uint64) bool {
	c, ok := dataplane.DecodeCookie(cookie)
	return ok && c.Kind == dataplane.KindFirewallSnoop
}

func learn(hold DNSHold, frame []byte) {
	if _, err := hold.Learn(frame); err != nil {
		klog.V(2).InfoS("A snooped DNS reply taught nothing", "err", err)
	}
}

// holdReply resumes a paused reply once the flows of the resolver's
// answers up to generation are in the bridge, or after the hold's bound.
// A reply learned while the resolver did not know its names yet (unnamed)
// is learned again once it does, and waits for that generation.
// If ctx ends first (the agent stops), the reply is dropped, unless
// hold.ReleaseOnStop.
func holdReply(ctx context.Context, client *ofconn.Client, hold DNSHold, pi *openflow.PacketIn2, generation uint64, unnamed bool, paused time.Time) {
	waitCtx, cancel := context.WithTimeout(ctx, hold.Timeout)
	outcome := dnsReleasedApplied
	var err error
	if unnamed {
		// Learned before the resolver knew its names: again, once it does.
		select {
		case <-hold.NamesSet:
			learn(hold, pi.Data)
			generation = hold.Generation()
		case <-waitCtx.Done():
			err = waitCtx.Err()
		}
	}
	if err == nil {
		err = hold.Applied(waitCtx, generation)
	}
	if err != nil {
		if ctx.Err() != nil && !hold.ReleaseOnStop {
			cancel()
			klog.InfoS("Dropped a DNS reply held while the agent stops: the flows for its addresses are not in the bridge; the pod's resolver asks again")
			return
		}
		outcome = dnsReleasedTimeout
		if ctx.Err() == nil {
			klog.InfoS("Released a DNS reply before the flows for its addresses were in the bridge", "held", hold.Timeout)
		}
	}
	cancel()
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resumeTimeout)
	defer cancel()
	if err := client.Send(sendCtx, pi.Resume()); err != nil {
		outcome = dnsResumeFailed
		klog.V(2).InfoS("The switch did not take a DNS reply's resumption", "err", err)
	}
	if m := hold.Metrics; m != nil {
		m.dnsHold.Observe(time.Since(paused).Seconds())
		m.dnsReplies.WithLabelValues(outcome).Inc()
	}
}

// askForPacketIns sets the connection's miss_send_len, keeping the
// switch's flags, and its packet-in format to NXT_PACKET_IN2.
func askForPacketIns(ctx context.Context, client *ofconn.Client) error {
	ctx, cancel := context.WithTimeout(ctx, snoopConfigTimeout)
	defer cancel()
	reply, err := client.Request(ctx, &openflow.GetConfigRequest{})
	if err != nil {
		return err
	}
	cfg, ok := reply.(*openflow.GetConfigReply)
	if !ok {
		return errors.New("the switch answered GET_CONFIG with something else")
	}
	set := &openflow.SetConfig{SwitchConfig: openflow.SwitchConfig{Flags: cfg.Flags, MissSendLen: 0xffff}}
	if err := client.Send(ctx, set, &openflow.SetPacketInFormat{Format: openflow.PacketInNX2}); err != nil {
		return err
	}
	return client.Barrier(ctx)
}
