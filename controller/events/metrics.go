package events

import "github.com/prometheus/client_golang/prometheus"

// Results of the Event counter. Every emitted Event ends written,
// superseded or abandoned (or is still pending); error counts write
// attempts, each of which is retried.
const (
	// resultEmitted: a component asked for the Event.
	resultEmitted = "emitted"
	// resultWritten: the Event reached the API server, as a new Event or as
	// a higher count of one written before.
	resultWritten = "written"
	// resultSuperseded: a Normal Event replaced, before it was written, by
	// a newer Normal Event of the same object.
	resultSuperseded = "superseded"
	// resultAbandoned: refused by the API server for good (its namespace
	// gone or being deleted, or invalid), or still unwritten when the
	// Emitter stopped.
	resultAbandoned = "abandoned"
	// resultError: a write attempt failed and will be retried.
	resultError = "error"
)

// NewCounter returns the counter of an Emitter's Events, named
// <prefix>_events_total, labelled by type, reason and result; the caller
// registers it.
func NewCounter(prefix string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: prefix + "_events_total",
		Help: "Kubernetes Events by type, reason and result: emitted (asked for); written (reached the API server, " +
			"as a new Event or a higher count of an earlier one); superseded (a Normal replaced by a newer Normal of " +
			"the same object before it was written); abandoned (refused for good, e.g. in a namespace being deleted, or " +
			"unwritten at shutdown); error (failed write attempts, each retried with backoff). Warnings are never superseded.",
	}, []string{"type", "reason", "result"})
}
