package dnsresolve

import "time"

// Clock tells the time and wakes the resolver at a deadline. Deadlines are
// absolute, so a clock that moves between reading the time and arming a
// wake-up cannot make the wake-up late.
type Clock interface {
	Now() time.Time
	// WakeAt returns a channel that is closed or sent to once Now() is at
	// or after t (at once if it already is), and a function releasing it.
	WakeAt(t time.Time) (<-chan time.Time, func())
}

// realClock is the system clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) WakeAt(t time.Time) (<-chan time.Time, func()) {
	timer := time.NewTimer(time.Until(t))
	return timer.C, func() { timer.Stop() }
}
