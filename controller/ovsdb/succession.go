package ovsdb

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// VswitchdLock is the database lock that ovs-vswitchd takes before it
// configures anything: a vswitchd that finds it held by another client
// logs "another ovs-vswitchd process is running" and builds no bridge
// until the lock is handed to it.
const VswitchdLock = "ovs_vswitchd"

// SuccessionHoldBound bounds how long GuardSuccession keeps the lock for
// one call of its hold function: a successor vswitchd waits that long at
// most. hold writes to a local socket in about a millisecond; the bound
// only keeps a wedged hold from leaving the node without a switch.
const SuccessionHoldBound = 5 * time.Second

// vacantRecheck is how often GuardSuccession asks for the lock again while
// no ovs-vswitchd runs at all (the lock is free at once). Each ask is one
// lock and one unlock on the local socket; a vswitchd that starts in
// between finds the lock free and takes it, so the interval only delays
// this client's return to the line behind it.
const vacantRecheck = 100 * time.Millisecond

// Successor is what GuardSuccession does around ovs-vswitchd's lock.
type Successor struct {
	// Hold runs with the lock held each time a vswitchd has given it up
	// (or, at first, when none holds it), before any successor may take
	// it.
	Hold func(context.Context) error
	// InLine, if not nil, is called each time this client stands in line
	// behind a running vswitchd.
	InLine func()
}

// GuardSuccession stands in line for ovs-vswitchd's lock behind the
// running vswitchd, until ctx ends or the connection to the database is
// lost (it returns the error; the caller dials again). ovsdb-server hands
// a lock to the first client in line the moment its holder's connection
// closes, so when a vswitchd dies this client holds the lock before any
// successor can: Hold runs then, and only after it returns is the lock
// passed on. A successor therefore reads the database as Hold left it,
// however soon it starts. While no vswitchd runs, Hold runs once, and
// again only after a vswitchd has held the lock. If Hold fails, or
// outlasts SuccessionHoldBound, the connection is closed, which frees the
// lock, and GuardSuccession returns the error.
func (d Database) GuardSuccession(ctx context.Context, successor Successor) error {
	s, err := d.dial(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	heldSinceOwner := false // hold ran since a vswitchd last owned the lock
	for {
		result, err := s.call(ctx, "lock", VswitchdLock)
		if err != nil {
			return err
		}
		var lock struct {
			Locked bool `json:"locked"`
		}
		if err := json.Unmarshal(result, &lock); err != nil {
			return fmt.Errorf("ovsdb: lock result %s: %w", result, err)
		}
		vacant := lock.Locked // nobody held it: no vswitchd runs
		if !lock.Locked {
			heldSinceOwner = false
			if successor.InLine != nil {
				successor.InLine()
			}
			if err := s.awaitNotification(ctx, "locked", VswitchdLock); err != nil {
				return err
			}
		}
		if !heldSinceOwner {
			holdCtx, cancel := context.WithTimeout(ctx, SuccessionHoldBound)
			err := successor.Hold(holdCtx)
			cancel()
			if err != nil {
				return fmt.Errorf("ovsdb: hold for ovs-vswitchd's successor: %w", err)
			}
			heldSinceOwner = true
		}
		unlockCtx, cancel := context.WithTimeout(ctx, SuccessionHoldBound)
		_, err = s.call(unlockCtx, "unlock", VswitchdLock)
		cancel()
		if err != nil {
			return err
		}
		if vacant {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(vacantRecheck):
			}
		}
	}
}
