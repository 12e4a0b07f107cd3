package ovsdb

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/ovstest"
	"github.com/egressflow/egressflow/test/wait"
)

// contendedLog is what ovs-vswitchd logs when another client holds its
// database lock.
const contendedLog = "another ovs-vswitchd process is running"

// successionWait bounds each wait of the succession test for a daemon.
const successionWait = 20 * time.Second

// TestSuccessorReadsTheHold: with a real ovsdb-server and ovs-vswitchd,
// GuardSuccession stands in line behind the running vswitchd and never
// holds while it runs. Each time vswitchd is killed and started again at
// once, Hold runs, and while it runs the successor waits (it logs that the
// lock is taken and builds no bridge); it builds the bridge once Hold has
// returned, and finds flow-restore-wait set. While vswitchd stays down,
// Hold runs once, not on every recheck.
func TestSuccessorReadsTheHold(t *testing.T) {
	sw := ovstest.Start(t)
	db := Database{Target: "unix:" + filepath.Join(sw.Dir, "db.sock")}
	ctx, cancel := context.WithCancel(context.Background())
	inLine := make(chan struct{}, 16)
	holding := make(chan chan struct{}) // each Hold hands over the channel that ends it
	guardDone := make(chan error, 1)
	go func() {
		guardDone <- db.GuardSuccession(ctx, Successor{
			InLine: func() { inLine <- struct{}{} },
			Hold: func(ctx context.Context) error {
				if err := db.HoldForwarding(ctx); err != nil {
					return err
				}
				proceed := make(chan struct{})
				select {
				case holding <- proceed:
				case <-ctx.Done():
					return ctx.Err()
				}
				select {
				case <-proceed:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-guardDone; !errors.Is(err, context.Canceled) {
			t.Errorf("GuardSuccession ended with %v; want the context's cancellation", err)
		}
	})
	waitInLine := func() {
		t.Helper()
		select {
		case <-inLine:
		case err := <-guardDone:
			t.Fatalf("GuardSuccession ended: %v", err)
		case <-time.After(successionWait):
			t.Fatal("GuardSuccession did not stand in line behind ovs-vswitchd")
		}
	}
	awaitHold := func() chan struct{} {
		t.Helper()
		select {
		case proceed := <-holding:
			return proceed
		case err := <-guardDone:
			t.Fatalf("GuardSuccession ended: %v", err)
		case <-time.After(successionWait):
			t.Fatal("ovs-vswitchd died and Hold did not run")
		}
		return nil
	}
	holdSet := func(want bool) {
		t.Helper()
		got, err := db.HoldingForwarding(context.Background())
		if err != nil || got != want {
			t.Fatalf("flow-restore-wait set: %v, %v; want %v", got, err, want)
		}
	}
	// The bridge's management socket answers once a vswitchd has built
	// the bridge (a killed one leaves the file behind).
	bridgeUp := func() error {
		conn, err := net.Dial("unix", sw.MgmtSocket)
		if err == nil {
			conn.Close()
		}
		return err
	}

	waitInLine()
	select {
	case <-holding:
		t.Fatal("Hold ran while ovs-vswitchd was running")
	case <-time.After(200 * time.Millisecond):
	}
	holdSet(false)

	for round := range 3 {
		contended := strings.Count(readFile(t, filepath.Join(sw.Dir, "ovs-vswitchd.log")), contendedLog)
		sw.StopVswitchd(t)
		sw.StartVswitchd(t)
		proceed := awaitHold()
		// The successor asks for the lock, finds it taken, and waits.
		wait.Until(t, successionWait, func() error {
			if n := strings.Count(readFile(t, filepath.Join(sw.Dir, "ovs-vswitchd.log")), contendedLog); n == contended {
				return errors.New("ovs-vswitchd has not logged that its lock is taken")
			}
			return nil
		})
		if bridgeUp() == nil {
			t.Fatalf("round %d: the successor built the bridge while Hold ran", round)
		}
		close(proceed)
		wait.Until(t, successionWait, bridgeUp)
		holdSet(true)
		waitInLine()
		if err := db.ReleaseForwarding(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	// Down for a while: one Hold, not one per recheck.
	sw.StopVswitchd(t)
	close(awaitHold())
	select {
	case <-holding:
		t.Fatal("Hold ran again while no ovs-vswitchd ran")
	case <-time.After(5 * vacantRecheck):
	}
	sw.StartVswitchd(t)
	wait.Until(t, successionWait, bridgeUp)
	waitInLine()
	holdSet(true)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
