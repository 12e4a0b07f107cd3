package dnsresolve

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"k8s.io/klog/v2"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
)

// Resolver keeps the addresses of the names it is given. Its methods are
// safe for concurrent use; Run does the lookups.
type Resolver struct {
	cfg      Config
	exchange exchanger
	changed  chan struct{}
	poke     chan struct{} // wakes Run after SetNames or Learn
	// tcp follows the DNS-over-TCP streams LearnFrame is handed.
	tcp *TCPReplies

	mu      sync.Mutex
	entries map[string]*entry // by key, only the wanted names
	events  eventHeap         // lookups and expiries to come
	dirty   bool              // Snapshot may differ from the last signal
	running bool
	// generation counts the signals of Changed (Generation).
	generation uint64
}

// entry is one wanted name: an exact name, looked up, or a wildcard,
// filled by the answers for the names it covers.
type entry struct {
	key      string
	wildcard bool
	// question is the A query for the name (the AAAA one differs in type);
	// askable is false for a wildcard or a name no query can carry.
	question dnsmessage.Question
	askable  bool
	// addrs: every address learned and not yet removed, with the time it
	// expires: addressLifetime after the last answer that gave it.
	addrs map[netip.Addr]time.Time
	// answered: an answer came (addresses, NXDOMAIN or NODATA); the name
	// is in the snapshot from then on.
	answered bool
	// failing: the last lookup failed (see holding).
	failing  bool
	failures int // failed lookups in a row
	// lastAnswer: the addresses of the last lookup that both types
	// answered, sorted; hadAnswer says there was one.
	lastAnswer []netip.Addr
	hadAnswer  bool

	nextQuery time.Time // when the next lookup is due; zero while in flight
	inFlight  bool
	sweepAt   time.Time // when expired addresses are next removed; zero if never
}

// New returns a Resolver asking cfg.Servers, or the nameservers of
// cfg.ResolvConf when there are none. It wants no names until SetNames.
func New(cfg Config) (*Resolver, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Servers) == 0 {
		servers, err := ReadResolvConf(cfg.ResolvConf)
		if err != nil {
			return nil, fmt.Errorf("reading nameservers: %w", err)
		}
		if len(servers) == 0 {
			return nil, fmt.Errorf("no nameserver line in %s", cfg.ResolvConf)
		}
		cfg.Servers = servers
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Resolver{
		cfg:      cfg,
		exchange: exchanger{servers: slices.Clone(cfg.Servers), timeout: cfg.Timeout},
		changed:  make(chan struct{}, 1),
		poke:     make(chan struct{}, 1),
		entries:  map[string]*entry{},
		tcp:      NewTCPReplies(),
	}, nil
}

// Servers returns the nameservers the resolver asks, in order.
func (r *Resolver) Servers() []netip.AddrPort { return slices.Clone(r.cfg.Servers) }

// SetNames sets the names wanted now, in esv1.DNSNameKey form
// (they are put in that form again: lower case, no final dot). A new
// exact name is looked up at once; a wildcard ("*.example.com") waits for
// answers about the names it covers. Names no longer wanted are forgotten
// with their addresses; a name wanted again starts afresh.
func (r *Resolver) SetNames(keys []string) {
	now := r.cfg.Clock.Now()
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		if k = esv1.DNSNameKey(k); k != "" {
			want[k] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, e := range r.entries {
		if !want[key] {
			delete(r.entries, key)
			if e.answered {
				r.dirty = true
			}
		}
	}
	for key := range want {
		if r.entries[key] == nil {
			e := newEntry(key)
			r.entries[key] = e
			if e.askable {
				r.scheduleQueryLocked(e, now)
			}
		}
	}
	r.publishLocked()
	r.wakeRun()
}

// holding reports whether e's addresses are kept past their expiry at
// now: while a lookup of the name is due, under way, or failing. A due
// lookup may bring the same addresses again (the grace of Prefetch
// normally lets it end first, but not a lookup waiting out a timeout or
// a free slot), and a failing server says nothing about them.
func (e *entry) holding(now time.Time) bool {
	return e.failing || e.inFlight || (!e.nextQuery.IsZero() && !e.nextQuery.After(now))
}

func newEntry(key string) *entry {
	e := &entry{key: key, wildcard: isWildcard(key), addrs: map[netip.Addr]time.Time{}}
	if e.wildcard {
		return e
	}
	name, err := dnsmessage.NewName(key + ".")
	if err != nil {
		return e
	}
	e.question = dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	// A name that packs into no query (a label over 63 bytes) stays
	// unanswered, and so absent from the snapshot.
	if _, err := buildQuery(0, e.question); err == nil {
		e.askable = true
	}
	return e
}

// Snapshot returns the addresses of every wanted name that has had an
// answer, sorted and without duplicates: those not yet expired, or all
// of them while a lookup of the name is due, under way or failing. A name present with no
// address had a negative answer (NXDOMAIN, NODATA) or all its addresses
// expired; a name absent has had no answer yet.
func (r *Resolver) Snapshot() map[string][]netip.Addr {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]netip.Addr, len(r.entries))
	for key, e := range r.entries {
		if !e.answered {
			continue
		}
		holding := e.holding(now)
		addrs := make([]netip.Addr, 0, len(e.addrs))
		for a, until := range e.addrs {
			if holding || until.After(now) {
				addrs = append(addrs, a)
			}
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		out[key] = addrs
	}
	return out
}

// Changed is signalled (buffered, coalesced) whenever Snapshot may
// differ from what it returned before: a name answered, an address came
// or expired, a name was dropped. An occasional signal with no difference
// is possible; a difference without a signal is not.
func (r *Resolver) Changed() <-chan struct{} { return r.changed }

// Learn files addresses that an answer seen elsewhere (a pod's DNS reply)
// gave name, valid for ttl, under name if it is wanted and under the
// wanted wildcard that covers it ("a.example.com" under "*.example.com",
// one label only). No address is an answer too (the name's NXDOMAIN or
// NODATA): it makes the name and its wildcard present. Unwanted names are
// ignored.
func (r *Resolver) Learn(name string, addrs []netip.Addr, ttl time.Duration) {
	key := esv1.DNSNameKey(name)
	if key == "" {
		return
	}
	now := r.cfg.Clock.Now()
	until := now.Add(addressLifetime(ttl, r.cfg))
	learned := make([]expiring, 0, len(addrs))
	for _, a := range addrs {
		if a.IsValid() {
			learned = append(learned, expiring{addr: a, until: until})
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fileLocked(key, learned, now) {
		r.publishLocked()
		r.wakeRun()
	}
}

// expiring is an address with the time it expires.
type expiring struct {
	addr  netip.Addr
	until time.Time
}

// fileLocked files an answer about key: under key's entry and under its
// wildcard's, each if wanted. It reports whether any was.
func (r *Resolver) fileLocked(key string, addrs []expiring, now time.Time) bool {
	filed := false
	targets := []string{key}
	if w := wildcardKey(key); w != "" && w != key {
		targets = append(targets, w)
	}
	for _, k := range targets {
		if e := r.entries[k]; e != nil {
			r.addLocked(e, addrs, now)
			filed = true
		}
	}
	return filed
}

// addLocked marks e answered and merges addrs into it, each keeping the
// later of its expiries.
func (r *Resolver) addLocked(e *entry, addrs []expiring, now time.Time) {
	if !e.answered {
		e.answered = true
		r.dirty = true
	}
	holding := e.holding(now)
	for _, a := range addrs {
		old, had := e.addrs[a.addr]
		if !had || (!holding && !old.After(now)) {
			r.dirty = true // new, or back after it expired
		}
		if !had || a.until.After(old) {
			e.addrs[a.addr] = a.until
		}
	}
	r.scheduleSweepLocked(e, now)
}

// sweepLocked removes e's expired addresses and schedules the next sweep,
// unless e is holding them: apply sweeps when the lookup is done.
func (r *Resolver) sweepLocked(e *entry, now time.Time) {
	e.sweepAt = time.Time{}
	if e.holding(now) {
		return
	}
	for a, until := range e.addrs {
		if !until.After(now) {
			delete(e.addrs, a)
			r.dirty = true
		}
	}
	r.scheduleSweepLocked(e, now)
}

// scheduleSweepLocked makes sure a sweep comes at e's earliest expiry
// (none while e is holding its addresses).
func (r *Resolver) scheduleSweepLocked(e *entry, now time.Time) {
	if e.holding(now) {
		return
	}
	var earliest time.Time
	for _, until := range e.addrs {
		if earliest.IsZero() || until.Before(earliest) {
			earliest = until
		}
	}
	if earliest.IsZero() || (!e.sweepAt.IsZero() && !earliest.Before(e.sweepAt)) {
		return
	}
	e.sweepAt = earliest
	heap.Push(&r.events, event{at: earliest, entry: e, kind: sweepEvent})
}

func (r *Resolver) scheduleQueryLocked(e *entry, at time.Time) {
	e.nextQuery = at
	heap.Push(&r.events, event{at: at, entry: e, kind: queryEvent})
}

// Generation counts the changes of Snapshot: it grows, before Changed is
// signalled, whenever Snapshot may differ from before. A Snapshot taken
// after reading Generation holds every address learned up to that
// generation, so a reply learned at generation g (LearnFrame, then
// Generation) is in the flows once a Snapshot read at g or later is.
func (r *Resolver) Generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.generation
}

// publishLocked signals Changed if anything changed since the last signal.
func (r *Resolver) publishLocked() {
	if !r.dirty {
		return
	}
	r.dirty = false
	r.generation++
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *Resolver) wakeRun() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// lookupResult is the outcome of one lookup: the A answer or error, and
// the AAAA one.
type lookupResult struct {
	entry   *entry
	answers [2]answer
	errs    [2]error
}

var lookupTypes = [2]dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA}

// lookup asks for e's A and AAAA records in parallel.
func (r *Resolver) lookup(ctx context.Context, e *entry) lookupResult {
	res := lookupResult{entry: e}
	var wg sync.WaitGroup
	for i, t := range lookupTypes {
		q := e.question
		q.Type = t
		wg.Go(func() { res.answers[i], res.errs[i] = r.exchange.query(ctx, q) })
	}
	wg.Wait()
	return res
}

// apply files a lookup's answers and schedules the next lookup: at the
// answers' TTL when both came, after retryDelay when either failed.
func (r *Resolver) apply(ctx context.Context, res lookupResult) {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := res.entry
	if r.entries[e.key] != e {
		e.inFlight = false
		return // forgotten meanwhile
	}
	var answered []answer
	var errs []error
	var seen []netip.Addr
	for i, ans := range res.answers {
		if res.errs[i] != nil {
			errs = append(errs, fmt.Errorf("%v: %w", lookupTypes[i], res.errs[i]))
			continue
		}
		answered = append(answered, ans)
		addrs := make([]expiring, 0, len(ans.addrs))
		for _, a := range ans.addrs {
			addrs = append(addrs, expiring{addr: a.addr, until: now.Add(addressLifetime(a.ttl, r.cfg))})
			seen = append(seen, a.addr)
		}
		r.fileLocked(e.key, addrs, now)
	}
	// Filed while still in flight, so that nothing expires meanwhile.
	e.inFlight = false
	logger := klog.FromContext(ctx)
	if len(errs) > 0 {
		// The addresses known stay while it fails, expired or not.
		e.failing = true
		e.failures++
		delay := retryDelay(e.failures, r.cfg)
		logger.V(2).Info("DNS lookup failed; keeping the addresses known", "name", e.key,
			"failures", e.failures, "retryIn", delay, "err", errors.Join(errs...))
		r.scheduleQueryLocked(e, now.Add(delay))
	} else {
		if e.failing {
			logger.V(2).Info("DNS lookup answered again", "name", e.key, "failures", e.failures)
		}
		e.failing = false
		e.failures = 0
		slices.SortFunc(seen, netip.Addr.Compare)
		seen = slices.Compact(seen)
		varies := e.hadAnswer && !slices.Equal(seen, e.lastAnswer)
		e.lastAnswer, e.hadAnswer = seen, true
		r.scheduleQueryLocked(e, now.Add(refreshDelay(lookupTTL(answered), varies, r.cfg)))
	}
	// The addresses held while the lookup was due or under way, and that
	// it did not bring again, go now if their TTL has run out.
	r.sweepLocked(e, now)
	r.publishLocked()
}

// Run looks the wanted names up and expires their addresses until ctx
// ends, then returns ctx's error once its lookups have stopped. One
// goroutine schedules every name's next lookup and expiry; at most
// maxConcurrentLookups lookups run at once. Call it once.
func (r *Resolver) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("dnsresolve: Run called twice")
	}
	r.running = true
	r.mu.Unlock()

	results := make(chan lookupResult)
	var lookups sync.WaitGroup
	defer lookups.Wait()
	lookupCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	var waiting []*entry // due, waiting for a lookup slot
	inFlight := 0
	for {
		now := r.cfg.Clock.Now()
		r.mu.Lock()
		waiting = r.popDueLocked(now, waiting)
		var start []*entry
		for len(waiting) > 0 && inFlight+len(start) < maxConcurrentLookups {
			e := waiting[0]
			waiting = waiting[1:]
			if r.entries[e.key] != e || e.inFlight {
				continue
			}
			e.inFlight = true
			e.nextQuery = time.Time{}
			start = append(start, e)
		}
		r.publishLocked()
		var wake <-chan time.Time
		release := func() {}
		if len(r.events) > 0 {
			wake, release = r.cfg.Clock.WakeAt(r.events[0].at)
		}
		r.mu.Unlock()

		for _, e := range start {
			inFlight++
			lookups.Go(func() {
				res := r.lookup(lookupCtx, e)
				select {
				case results <- res:
				case <-lookupCtx.Done():
				}
			})
		}

		select {
		case <-ctx.Done():
			release()
			return ctx.Err()
		case res := <-results:
			inFlight--
			r.apply(ctx, res)
		case <-r.poke:
		case <-wake:
		}
		release()
	}
}

// popDueLocked takes every event due at now: sweeps run here, due
// lookups join waiting. Events made stale by a later schedule or a
// forgotten name are dropped.
func (r *Resolver) popDueLocked(now time.Time, waiting []*entry) []*entry {
	for len(r.events) > 0 && !r.events[0].at.After(now) {
		ev := heap.Pop(&r.events).(event)
		e := ev.entry
		if r.entries[e.key] != e {
			continue
		}
		switch ev.kind {
		case sweepEvent:
			if ev.at.Equal(e.sweepAt) {
				r.sweepLocked(e, now)
			}
		case queryEvent:
			if ev.at.Equal(e.nextQuery) && !e.inFlight {
				waiting = append(waiting, e)
			}
		}
	}
	return waiting
}

type eventKind int

const (
	queryEvent eventKind = iota // look the name up
	sweepEvent                  // remove the name's expired addresses
)

type event struct {
	at    time.Time
	entry *entry
	kind  eventKind
}

// eventHeap orders events by time (container/heap).
type eventHeap []event

func (h eventHeap) Len() int           { return len(h) }
func (h eventHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h eventHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)        { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	last := old[len(old)-1]
	*h = old[:len(old)-1]
	return last
}
