package agent

import (
	"context"

	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/ofconn"
)

// OpenFlowSwitch is the Switch of a real bridge, through an ofconn.Client
// connected to its management socket.
type OpenFlowSwitch struct {
	Client *ofconn.Client
}

// DumpFlows reads every flow of the bridge whose cookie matches, handing
// each to fn, in place, as its part of the dump arrives.
func (s OpenFlowSwitch) DumpFlows(ctx context.Context, cookie, mask uint64, fn func(openflow.FlowEntry) error) error {
	return s.Client.DumpFlowEntries(ctx, &openflow.FlowDescRequest{Table: openflow.TableAll, Cookie: cookie, CookieMask: mask}, fn)
}

// BeginBundle opens an atomic bundle transaction.
func (s OpenFlowSwitch) BeginBundle(ctx context.Context) (Bundle, error) {
	t, err := s.Client.BeginBundle(ctx)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return t, nil
}

// Ports describes the bridge's ports.
func (s OpenFlowSwitch) Ports(ctx context.Context) ([]openflow.Port, error) {
	return s.Client.Ports(ctx)
}

// Groups describes the bridge's groups.
func (s OpenFlowSwitch) Groups(ctx context.Context) ([]openflow.GroupDesc, error) {
	return s.Client.Groups(ctx)
}

// FlushConntrack removes the connections the filter selects.
func (s OpenFlowSwitch) FlushConntrack(ctx context.Context, filter *openflow.CTFlush) error {
	return s.Client.FlushConntrack(ctx, filter)
}

// SendPacket sends a PACKET_OUT and waits for the bridge to have run it.
func (s OpenFlowSwitch) SendPacket(ctx context.Context, po *openflow.PacketOut) error {
	return s.Client.SendPacketOut(ctx, po)
}

// Connected reports whether the OpenFlow connection is up.
func (s OpenFlowSwitch) Connected() bool { return s.Client.Connected() }

// Generation counts the client's successful connections.
func (s OpenFlowSwitch) Generation() uint64 { return s.Client.Generation() }
