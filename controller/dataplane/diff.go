package dataplane

import (
	"slices"
	"strings"

	"github.com/egressflow/egressflow/openflow"
)

// Changes turn the flows on the bridge into the desired ones. Sent as one
// atomic bundle, they move only what differs: a flow already right is not
// touched, so its counters and the traffic through it are undisturbed.
type Changes struct {
	// Add holds new flows and flows whose cookie or actions changed (an ADD
	// with the same table, priority and match replaces the old flow).
	Add []*openflow.FlowMod
	// Delete holds strict deletes of egressflow's flows that are no longer
	// desired, each restricted to the cookie it had, so a foreign flow with
	// the same match is never removed.
	Delete []*openflow.FlowMod

	// The FlowIDs of Add and Delete, in the same order, kept so that
	// ApplyTo need not marshal the matches again.
	addIDs, deleteIDs []string
}

// ApplyTo updates installed (see Installed) to what the bridge holds once
// the changes were applied.
func (c Changes) ApplyTo(installed map[string]*openflow.FlowMod) {
	for _, id := range c.deleteIDs {
		delete(installed, id)
	}
	for i, id := range c.addIDs {
		installed[id] = c.Add[i]
	}
}

// Empty reports whether there is nothing to send.
func (c Changes) Empty() bool { return len(c.Add)+len(c.Delete) == 0 }

// Installed indexes the flows dumped from the bridge by FlowID, keeping only
// egressflow's (by cookie prefix): the rest belong to someone else.
func Installed(flows []*openflow.Flow) map[string]*openflow.FlowMod {
	out := make(map[string]*openflow.FlowMod, len(flows))
	for _, f := range flows {
		if f.Cookie&CookiePrefixMask == CookiePrefix {
			fm := f.FlowMod()
			out[FlowID(fm)] = fm
		}
	}
	return out
}

// Diff compares the desired flows with the installed ones (see Installed).
func Diff(desired []*openflow.FlowMod, installed map[string]*openflow.FlowMod) Changes {
	var c Changes
	wanted := make(map[string]bool, len(desired))
	for _, fm := range desired {
		id := FlowID(fm)
		wanted[id] = true
		if f, ok := installed[id]; ok && f.Cookie == fm.Cookie && instructionsText(f.Instructions) == instructionsText(fm.Instructions) {
			continue
		}
		c.Add = append(c.Add, fm)
		c.addIDs = append(c.addIDs, id)
	}
	for id := range installed {
		if !wanted[id] {
			c.deleteIDs = append(c.deleteIDs, id)
		}
	}
	// Map order is random; a stable order makes bundles reproducible.
	slices.Sort(c.deleteIDs)
	for _, id := range c.deleteIDs {
		f := installed[id]
		c.Delete = append(c.Delete, &openflow.FlowMod{
			Command: openflow.FlowDeleteStrict, Table: f.Table, Priority: f.Priority, Match: f.Match,
			Cookie: f.Cookie, CookieMask: ^uint64(0),
		})
	}
	return c
}

// instructionsText is the canonical text of instructions, the form
// ovs-ofctl prints, so that a flow read back from OVS compares equal to the
// one written even where OVS re-encodes an action.
func instructionsText(insts []openflow.Instruction) string {
	var b strings.Builder
	for _, i := range insts {
		b.WriteString(i.String())
		b.WriteByte(';')
	}
	return b.String()
}
