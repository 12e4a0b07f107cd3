package cluster

import (
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/sets"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
)

// state is what one leadership term knows of the EgressService hosts
// beyond the informer caches: the assignments it made, the node labels it
// saw or wrote, and its own writes that the caches have not caught up
// with (agent liveness is the term's, shared by every member). Every field is
// guarded by mu; no method makes an API call.
type state struct {
	mu sync.Mutex

	services map[string]*svcRecord
	// byHost indexes services by reserved host: the load of a node.
	byHost map[string]sets.Set[string]
	// byConfirmed indexes services by the host their status names: the
	// labels a node should carry.
	byConfirmed map[string]sets.Set[string]
	// claims are, per label key, the services confirmed on a node whose
	// name maps to that key; the least one owns the label (see owner).
	claims map[string]sets.Set[string]
	// waiting are services that found no candidate node: a node becoming a
	// candidate re-syncs them.
	waiting sets.Set[string]
	// withoutHost are services whose status.host is empty.
	withoutHost sets.Set[string]

	// actual are the service labels each node carries, as last seen in the
	// cache or in a patch response, whichever is newer; carriers indexes it.
	actual   map[string]*nodeLabels
	carriers map[string]sets.Set[string]

	// view is the candidacy input of every node (nil until first built);
	// staleNodes are the nodes whose entry is refreshed before the next
	// decision, so that a node's change costs one entry, not the view.
	view       map[string]*assign.Node
	staleNodes sets.Set[string]

	// written are status writes the EgressService cache has not caught up
	// with yet, so that a sync never decides from its own stale echo.
	written map[string]*esv1.EgressService
	// eventTime is when the oldest unprocessed event of a service arrived.
	eventTime map[string]time.Time
}

type svcRecord struct {
	// host is the reserved host, counted in its load ("" for none or ALL).
	host string
	// confirmed is the node its status names, once written ("" otherwise).
	confirmed string
	// label is the service's node label key.
	label string
}

type nodeLabels struct {
	resourceVersion string
	keys            sets.Set[string]
}

func newState() *state {
	return &state{
		services:    map[string]*svcRecord{},
		byHost:      map[string]sets.Set[string]{},
		byConfirmed: map[string]sets.Set[string]{},
		claims:      map[string]sets.Set[string]{},
		waiting:     sets.New[string](),
		withoutHost: sets.New[string](),
		actual:      map[string]*nodeLabels{},
		carriers:    map[string]sets.Set[string]{},
		staleNodes:  sets.New[string](),
		written:     map[string]*esv1.EgressService{},
		eventTime:   map[string]time.Time{},
	}
}

func (s *state) record(key string) *svcRecord {
	r := s.services[key]
	if r == nil {
		ns, name := splitKey(key)
		r = &svcRecord{label: assign.LabelKey(ns, name)}
		s.services[key] = r
	}
	return r
}

// load is the number of services reserved on node.
func (s *state) load(node string) int { return s.byHost[node].Len() }

// reserve makes host (a node, or "") the reserved host of key, and keeps
// the view's loads (assign.Node.Load) equal to load.
func (s *state) reserve(key, host string) {
	r := s.record(key)
	if r.host == host {
		return
	}
	moveIndex(s.byHost, key, r.host, host)
	if n := s.view[r.host]; n != nil {
		n.Load--
	}
	if n := s.view[host]; n != nil {
		n.Load++
	}
	r.host = host
}

// confirm records that key's status names host (a node, or ""). It returns
// the nodes whose desired labels may have changed and the other services
// whose label ownership may have changed.
func (s *state) confirm(key, host string) (nodes, services []string) {
	r := s.record(key)
	old := r.confirmed
	if old == host {
		return nil, nil
	}
	moveIndex(s.byConfirmed, key, old, host)
	r.confirmed = host
	before := s.owner(r.label)
	moveIndex(s.claims, key, boolKey(old != "", r.label), boolKey(host != "", r.label))
	nodes = append(nodes, old, host)
	if after := s.owner(r.label); after != before {
		// The label changes hands between services of the same key.
		for other := range s.claims[r.label] {
			if other != key {
				nodes = append(nodes, s.services[other].confirmed)
				services = append(services, other)
			}
		}
	}
	return nonEmpty(nodes), services
}

// release forgets key (its EgressService is gone) and returns the nodes
// whose labels may change.
func (s *state) release(key string) (nodes, services []string) {
	delete(s.eventTime, key) // also of a key synced only for its inputs' label
	if _, ok := s.services[key]; !ok {
		return nil, nil
	}
	s.reserve(key, "")
	nodes, services = s.confirm(key, "")
	delete(s.services, key)
	s.waiting.Delete(key)
	s.withoutHost.Delete(key)
	delete(s.written, key)
	delete(s.eventTime, key)
	return nodes, services
}

// owner is the service that owns label key: the least of its claimants.
func (s *state) owner(label string) string {
	c := s.claims[label]
	if c.Len() == 0 {
		return ""
	}
	return slices.Min(c.UnsortedList())
}

// holder is the node that should carry label key, or "".
func (s *state) holder(label string) string {
	if o := s.owner(label); o != "" {
		return s.services[o].confirmed
	}
	return ""
}

// labelConflict is a note for the Ready message when another service owns
// key's label key (their names map to the same key). Call with mu held.
func (s *state) labelConflict(key, label string) string {
	var other string
	for o := range s.claims[label] {
		if o != key && o < key && (other == "" || o < other) {
			other = o
		}
	}
	if other == "" {
		return ""
	}
	return fmt.Sprintf(" (but %s maps to the same label and holds it; the announcer cannot tell the two apart)", other)
}

// desiredLabels are the label keys node should carry.
func (s *state) desiredLabels(node string) sets.Set[string] {
	want := sets.New[string]()
	for key := range s.byConfirmed[node] {
		if l := s.services[key].label; s.owner(l) == key {
			want.Insert(l)
		}
	}
	return want
}

// observeNode takes node's service labels as the truth unless what is known
// is newer (a patch response the cache has not caught up with). It returns
// the label keys that node no longer carries.
func (s *state) observeNode(node *corev1.Node) (removed []string) {
	if cur := s.actual[node.Name]; cur != nil && !newer(node.ResourceVersion, cur.resourceVersion) {
		return nil
	}
	keys := sets.New[string]()
	for k := range node.Labels {
		if assign.IsLabelKey(k) {
			keys.Insert(k)
		}
	}
	return s.setActual(node.Name, &nodeLabels{resourceVersion: node.ResourceVersion, keys: keys})
}

// forgetNode drops a deleted node's labels.
func (s *state) forgetNode(name string) (removed []string) {
	return s.setActual(name, nil)
}

func (s *state) setActual(name string, nl *nodeLabels) (removed []string) {
	var before, after sets.Set[string]
	if cur := s.actual[name]; cur != nil {
		before = cur.keys
	}
	if nl != nil {
		after = nl.keys
		s.actual[name] = nl
	} else {
		delete(s.actual, name)
	}
	for k := range before.Difference(after) {
		removed = append(removed, k)
		moveIndex(s.carriers, name, k, "")
	}
	for k := range after.Difference(before) {
		moveIndex(s.carriers, name, "", k)
	}
	return removed
}

// actualLabels are the service labels node carries, as far as is known.
func (s *state) actualLabels(node string) sets.Set[string] {
	if cur := s.actual[node]; cur != nil {
		return cur.keys
	}
	return sets.New[string]()
}

// carriedElsewhere says whether a node other than node carries label.
func (s *state) carriedElsewhere(label, node string) bool {
	for n := range s.carriers[label] {
		if n != node {
			return true
		}
	}
	return false
}

// freshest returns es or the newer object this term wrote for it.
func (s *state) freshest(key string, es *esv1.EgressService) *esv1.EgressService {
	return fresherOfWritten(s.written, key, es)
}

// fresherOfWritten returns obj, or the status write of key in written (the
// writes the informer cache has not caught up with) if that is newer; once
// the cache has caught up, the write is forgotten.
func fresherOfWritten[T interface{ GetResourceVersion() string }](written map[string]T, key string, obj T) T {
	w, ok := written[key]
	if !ok {
		return obj
	}
	if newer(w.GetResourceVersion(), obj.GetResourceVersion()) {
		return w
	}
	delete(written, key)
	return obj
}

// noteEvent remembers when the first unprocessed event of key arrived.
func (s *state) noteEvent(key string, t time.Time) {
	if _, ok := s.eventTime[key]; !ok {
		s.eventTime[key] = t
	}
}

// takeEvent returns and forgets that time.
func (s *state) takeEvent(key string) (time.Time, bool) {
	t, ok := s.eventTime[key]
	delete(s.eventTime, key)
	return t, ok
}

// newer says whether resource version a is newer than b (different
// versions of one object). Versions that do not parse as the API server's
// integers count as newer: the cache is then trusted.
func newer(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err != nil || c > 0
}

// moveIndex moves item from set from to set to of an index ("" is none).
func moveIndex(index map[string]sets.Set[string], item, from, to string) {
	if from == to {
		return
	}
	if from != "" {
		if set := index[from]; set != nil {
			set.Delete(item)
			if set.Len() == 0 {
				delete(index, from)
			}
		}
	}
	if to != "" {
		if index[to] == nil {
			index[to] = sets.New[string]()
		}
		index[to].Insert(item)
	}
}

func boolKey(ok bool, key string) string {
	if ok {
		return key
	}
	return ""
}

func nonEmpty(in []string) []string {
	out := in[:0]
	for _, s := range in {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
