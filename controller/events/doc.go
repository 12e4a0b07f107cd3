// Package events writes the Kubernetes Events (core/v1) of egressflow's two
// components, the cluster controller and the node agent, so that the
// Events that say why are never lost: every Warning reaches the API server,
// and so does the Event of each object's latest change. Normal Events
// that a newer Normal of the same object replaced before they were written
// may be skipped.
//
// It replaces client-go's record.EventBroadcaster, which loses Events by
// design under a burst: its recorder puts each Event on a 1,000-entry
// channel and drops it when the channel is full, and so does the
// broadcaster for its watcher's channel (watch.DropIfChannelFull); one
// goroutine writes them one at a time; its spam filter lets a source write
// 25 Events per object and type, then one per 5 minutes; it abandons an
// Event on any error status from the API server (after the REST client's
// own retries) and after 12 failed tries. With 5,000 services assigned at
// start-up, 1,714 of the 5,000 Assigned Events reached the API server
// (make bench-controller, issue 15).
//
// # Shape
//
// An Emitter keeps, per involved object, what it still has to write: the
// latest Normal Event (a newer Normal supersedes an older one not yet
// written), and every distinct Warning (by reason and message; a repeat
// raises the count of the pending one, as the API's Event count does). A
// rate-limited work queue of objects feeds a few workers, which write an
// object's pending Events oldest first: an Event identical to one this
// Emitter already wrote about the object (same type, reason and message,
// within the API server's Event TTL) raises that Event's count and
// lastTimestamp by a patch, as client-go's correlator does; any other is
// created. A write that fails is retried with per-object exponential
// backoff, for as long as the process runs, unless the API server refuses
// it for good (the namespace is gone or being deleted, or the Event is
// invalid). On shutdown the queued Events are written for a short drain.
//
// # Memory
//
// Per object: at most one pending Normal; at most MaxDistinctWarnings
// pending Warnings with distinct messages, past which a Warning is folded
// into the pending one of its reason (its count grows and its message
// becomes the newest), so the number of pending Warnings is at most
// MaxDistinctWarnings plus the number of reasons, a fixed set; and at most
// MaxWrittenPerObject records of written Events (name and count, for the
// count patches), each forgotten after EventTTL. An object's state goes
// once it has nothing pending and no record left.
//
// Events keep client-go's shape: involvedObject, reason, message, type,
// source (component and host), reportingController and reportingInstance,
// firstTimestamp, lastTimestamp and count, and a name of the object's name
// and a timestamp.
//
// # What it must not touch
//
// It writes Events and nothing else. It decides nothing about which Events
// to emit: its callers do.
package events
