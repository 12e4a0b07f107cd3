package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
)

// snoopConfigTimeout bounds the configuration exchange on each (re)connection
// of the snoop connection: a local switch answers in milliseconds; longer
// only delays noticing a wedged one.
const snoopConfigTimeout = 5 * time.Second

// SnoopDNS keeps the agent's second OpenFlow connection to the bridge at
// target (its .mgmt socket), the one Open vSwitch sends packet-ins on,
// until ctx ends. TableFirewall's snoop flows (dataplane.KindFirewallSnoop)
// copy the DNS replies to the pods of namespaces with a dnsName rule to the
// controller; each goes to learn (dnsresolve.Resolver.LearnFrame), so that
// a name's addresses are known as soon as the pod has them, and wildcard
// rules fill at all.
//
// A connection of its own: a service connection gets no asynchronous
// message until it sets a nonzero miss_send_len (ovs-ofctl(8), monitor), so
// the agent's main connection, which never does, stays free of them. On
// each connection SnoopDNS sets it, keeping the switch's fragment handling
// as it reads it (that flag is the bridge's, not the connection's).
func SnoopDNS(ctx context.Context, target string, learn func(frame []byte) (int, error), opts ...openflow.Option) error {
	handle := func(_ openflow.Header, m openflow.Message) {
		pi, ok := m.(*openflow.PacketIn)
		if !ok {
			return
		}
		if c, ok := dataplane.DecodeCookie(pi.Cookie); !ok || c.Kind != dataplane.KindFirewallSnoop {
			return
		}
		if _, err := learn(pi.Data); err != nil {
			klog.V(2).InfoS("A snooped DNS reply taught nothing", "err", err)
		}
	}
	client, err := openflow.Dial(ctx, target, append(opts, openflow.WithUnsolicited(handle))...)
	if err != nil {
		return fmt.Errorf("DNS snoop connection to %s: %w", target, err)
	}
	defer client.Close()
	for {
		if err := askForPacketIns(ctx, client); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Could not ask the bridge for DNS replies; retrying on reconnection", "target", target)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-client.Reconnected():
		}
	}
}

// askForPacketIns sets the connection's miss_send_len, keeping the
// switch's flags.
func askForPacketIns(ctx context.Context, client *openflow.Client) error {
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
	if err := client.Send(ctx, set); err != nil {
		return err
	}
	return client.Barrier(ctx)
}
