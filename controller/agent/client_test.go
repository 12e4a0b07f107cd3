package agent

import (
	"testing"

	"k8s.io/client-go/util/watchlist"
)

// client-go's reflectors ask the client whether it can stream an initial
// list; the agent's clientsets answer as streamInitialLists says.
func TestInformersListAsConfigured(t *testing.T) {
	for name, client := range map[string]any{"kube": listingKube{}, "egress": listingEgress{}} {
		if got := watchlist.DoesClientNotSupportWatchListSemantics(client); got != !streamInitialLists {
			t.Errorf("%s clientset: streamed lists unsupported = %v, want %v", name, got, !streamInitialLists)
		}
	}
}
