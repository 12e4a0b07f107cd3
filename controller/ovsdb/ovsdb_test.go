package ovsdb

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/ovstest"
)

// TestHoldAndReleaseOnRealDatabase: against a real ovsdb-server, holding
// sets flow-restore-wait to "true" (over any other value) and keeps the
// other other_config keys; releasing removes it alone; both are
// idempotent.
func TestHoldAndReleaseOnRealDatabase(t *testing.T) {
	sw := ovstest.Start(t)
	db := Database{Target: "unix:" + filepath.Join(sw.Dir, "db.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sw.Vsctl(t, "set", "open_vswitch", ".", "other_config:keep-me=1", "other_config:flow-restore-wait=false")
	otherConfig := func() string {
		return strings.TrimSpace(sw.Vsctl(t, "get", "open_vswitch", ".", "other_config"))
	}
	holding := func(want bool) {
		t.Helper()
		got, err := db.HoldingForwarding(ctx)
		if err != nil || got != want {
			t.Fatalf("HoldingForwarding = %v, %v; want %v (other_config %s)", got, err, want, otherConfig())
		}
	}
	holding(false)
	for range 2 {
		if err := db.HoldForwarding(ctx); err != nil {
			t.Fatal(err)
		}
		holding(true)
		if got := otherConfig(); got != `{flow-restore-wait="true", keep-me="1"}` {
			t.Fatalf("after hold, other_config %s", got)
		}
	}
	for range 2 {
		if err := db.ReleaseForwarding(ctx); err != nil {
			t.Fatal(err)
		}
		holding(false)
		if got := otherConfig(); got != `{keep-me="1"}` {
			t.Fatalf("after release, other_config %s", got)
		}
	}
}

// TestErrorsAreClear: a bad target, a missing socket and a cancelled call
// fail with an error that says so, and never hang.
func TestErrorsAreClear(t *testing.T) {
	ctx := context.Background()
	if err := (Database{Target: "db.sock"}).HoldForwarding(ctx); err == nil || !strings.Contains(err.Error(), "want unix:PATH") {
		t.Errorf("target without a scheme: %v", err)
	}
	missing := Database{Target: "unix:" + filepath.Join(t.TempDir(), "db.sock")}
	if err := missing.ReleaseForwarding(ctx); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing socket: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := missing.HoldingForwarding(cancelled); err == nil {
		t.Error("a cancelled call succeeded")
	}
}
