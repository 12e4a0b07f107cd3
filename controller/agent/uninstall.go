package agent

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/openflow"
)

// Uninstall removes what egressflow holds on the node: every flow carrying
// its cookie prefix (the pod guard among them, so the node's pods egress as
// the CNI sends them, as before egressflow) and every group of its ID
// range, its policy-routing rules, its nftables table (removeHostFirewall,
// if not nil), and a hold of a restarting ovs-vswitchd it may have left. The agent runs it
// on its way out when egressflow itself is being removed (cmd/egressflow-
// agent); a restarting agent keeps everything in place. It tries every
// part and reports the failures together.
func Uninstall(ctx context.Context, sw Switch, rules RuleSyncer, removeHostFirewall func(context.Context) error, forwarding ForwardingGate) error {
	var errs []error
	var changes dataplane.Changes
	changes.Delete = []*openflow.FlowMod{{
		Command: openflow.FlowDelete, Table: openflow.TableAll,
		Cookie: dataplane.CookiePrefix, CookieMask: dataplane.CookiePrefixMask,
	}}
	// Its groups, after the flows that use them; a bridge whose groups
	// cannot be read still loses egressflow's flows.
	if groups, err := sw.Groups(ctx); err != nil {
		errs = append(errs, fmt.Errorf("read the bridge's groups: %w", err))
	} else {
		changes.DeleteGroups = dataplane.GroupDeletes(groups)
	}
	if _, err := applyOnce(ctx, sw, &changes); err != nil {
		errs = append(errs, fmt.Errorf("delete egressflow's flows and groups: %w", err))
	}
	if _, removed, err := rules.Sync(nil); err != nil {
		errs = append(errs, fmt.Errorf("remove egressflow's ip rules: %w", err))
	} else {
		klog.InfoS("Removed egressflow's ip rules", "rules", removed)
	}
	if _, removed, err := rules.SyncRoutes(nil); err != nil {
		errs = append(errs, fmt.Errorf("remove the routes of egressflow's tables: %w", err))
	} else {
		klog.InfoS("Removed the routes of egressflow's tables", "routes", removed)
	}
	if removeHostFirewall != nil {
		if err := removeHostFirewall(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if forwarding != nil {
		if err := forwarding.ReleaseForwarding(ctx); err != nil {
			errs = append(errs, fmt.Errorf("release ovs-vswitchd's forwarding: %w", err))
		}
	}
	return errors.Join(errs...)
}
