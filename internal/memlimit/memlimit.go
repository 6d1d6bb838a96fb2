// Package memlimit keeps the Go runtime's soft memory limit close to what an
// idle server holds, so the memory a burst of work took goes back to the
// system once the server is quiet again.
//
// With GOGC alone a Go process keeps about twice its live heap: after a
// burst (a thousand Dots applied, a compaction) the heap that served it
// stays mapped until the next burst. A fixed GOMEMLIMIT would bound that, but
// no fixed number fits both a server with one Dot and one with a thousand,
// and a limit below what the server needs makes the collector run without
// pause. So the limit follows what the server holds: after each collection
// that comes long after the one before (the server is idle: at rest the
// runtime collects every two minutes), the limit is set to the live heap
// plus a tenth (8 MiB at least), plus what the runtime holds and cannot
// give back (the heap's unused slack within its spans, its memory outside
// the heap); the scavenger then returns the rest. A collection soon after
// the one before means work is under way, and the limit is lifted, so GOGC
// alone paces the collector while the server is busy.
//
// Only the runtime's own (automatic) collections say whether the server is
// busy. A collection this package forces to give memory back is no sign of
// work: counting it as one made every release schedule the next, and an
// idle server collected and paged its program out every idleGap for ever.
//
// A burst ends without a collection to say so: an idle server's next one is
// the runtime's periodic collection, up to two minutes later, and until then
// the heap the burst grew stays. So a busy spell's collections each put off a
// release; when none has come for idleGap, the burst is over, and one
// collection and scavenge (debug.FreeOSMemory) sets the idle limit and gives
// the rest back at once.
//
// GOMEMLIMIT set in the environment is the operator's choice: it is kept and
// nothing is tuned.
package memlimit

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// EnvVar is the Go runtime's own variable; when set, the tuner stays off.
const EnvVar = "GOMEMLIMIT"

const (
	// idleGap: a collection this long after the previous one finds the
	// server idle.
	idleGap = 10 * time.Second
	// headroom is the share of the live heap the limit leaves above it,
	// and minHeadroom the least: room for what an idle server allocates
	// between two collections, tens of seconds apart (more often would
	// look like work, see idleGap).
	headroom    = 0.1
	minHeadroom = 8 << 20
	// floor is the lowest limit set, so a tiny heap never makes the
	// collector run on every allocation.
	floor = 48 << 20
)

// Tuner is a running tuner; Stop ends it and lifts the limit it set.
type Tuner struct {
	stopped atomic.Bool
	// lastGC is when the previous automatic collection ended, in Unix
	// nanoseconds; automatic is the runtime's count of them then.
	lastGC    atomic.Int64
	automatic atomic.Uint64
	// Limit is the last limit set (math.MaxInt64: none), for tests and logs.
	limit atomic.Int64
	now   func() time.Time
	read  func() figures
	set   func(int64) int64
	// release is releaseBurst; after runs f d from now.
	release func()
	after   func(d time.Duration, f func()) *time.Timer

	mu    sync.Mutex
	quiet *time.Timer // the release a busy spell put off; nil when none waits
}

// Start tunes the limit after every collection from now on, unless
// GOMEMLIMIT is set (then it returns nil: nothing to stop).
func Start() *Tuner {
	if os.Getenv(EnvVar) != "" {
		return nil
	}
	t := &Tuner{now: time.Now, read: readRuntime, set: debug.SetMemoryLimit, release: releaseBurst, after: time.AfterFunc}
	t.lastGC.Store(t.now().UnixNano())
	t.automatic.Store(t.read().automatic)
	t.limit.Store(math.MaxInt64)
	t.arm()
	return t
}

// Stop ends the tuning and lifts the limit.
func (t *Tuner) Stop() {
	if t == nil || t.stopped.Swap(true) {
		return
	}
	t.mu.Lock()
	if t.quiet != nil {
		t.quiet.Stop()
	}
	t.mu.Unlock()
	t.set(math.MaxInt64)
}

// Limit is the limit the tuner set last; math.MaxInt64 when none.
func (t *Tuner) Limit() int64 { return t.limit.Load() }

// arm leaves an object for the collector to find: its cleanup runs after
// the collection that freed it, tunes, and arms the next.
func (t *Tuner) arm() {
	sentinel := new([64]byte)
	runtime.AddCleanup(sentinel, func(t *Tuner) {
		if t.stopped.Load() {
			return
		}
		t.afterGC()
		t.arm()
	}, t)
}

// afterGC sets the limit from the collection that just ended: the idle
// limit after a forced collection (a release) or an automatic one long
// after the last, none after an automatic one soon after the last.
func (t *Tuner) afterGC() {
	f := t.read()
	limit := idleLimit(f)
	if f.automatic != t.automatic.Swap(f.automatic) {
		now := t.now().UnixNano()
		if gap := time.Duration(now - t.lastGC.Swap(now)); gap < idleGap {
			limit = math.MaxInt64
			t.releaseWhenQuiet()
		}
	}
	if limit != t.limit.Load() {
		t.set(limit)
		t.limit.Store(limit)
	}
}

// releaseWhenQuiet puts the release off to idleGap after this collection.
func (t *Tuner) releaseWhenQuiet() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.quiet != nil && t.quiet.Stop() {
		t.quiet.Reset(idleGap)
		return
	}
	t.quiet = t.after(idleGap, t.releaseIfQuiet)
}

// releaseIfQuiet gives the heap a burst left back, unless a collection came
// since (its own release then waits) or the tuner stopped. Its collection
// finds the server idle, so the limit follows the live heap from then on.
func (t *Tuner) releaseIfQuiet() {
	if t.stopped.Load() || time.Duration(t.now().UnixNano()-t.lastGC.Load()) < idleGap {
		return
	}
	t.release()
}

// figures are the runtime's, as the tuner reads them after a collection.
type figures struct {
	// live is the heap the last collection found live.
	live uint64
	// unused is the heap's slack within its spans: reserved for objects,
	// holding none, and not returnable while the spans hold others.
	unused uint64
	// outsideHeap is the runtime's memory that is not the heap (stacks,
	// its own structures).
	outsideHeap uint64
	// automatic counts the runtime's own collections, not forced ones.
	automatic uint64
}

// idleLimit is the limit for an idle server holding f: the live heap and
// its headroom, what the runtime cannot give back, and never under floor.
func idleLimit(f figures) int64 {
	room := max(int64(float64(f.live)*headroom), minHeadroom)
	return max(int64(f.live)+room+int64(f.unused)+int64(f.outsideHeap), floor)
}

// readRuntime reads the figures from runtime/metrics.
func readRuntime() figures {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/gc/cycles/automatic:gc-cycles"},
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	f := figures{live: v(0), unused: v(3), automatic: v(6)}
	if heap, total := v(2)+v(3)+v(4)+v(5), v(1); total > heap {
		f.outsideHeap = total - heap
	}
	return f
}

// releaseBurst gives back what a burst of work left: the free heap, and the
// program's pages its code paths brought in (read back when used again).
func releaseBurst() {
	freeOSMemory()
	_, _ = pageOut()
}

// freeOSMemory and pageOut are debug.FreeOSMemory and pageOutProgram,
// replaced in tests.
var (
	freeOSMemory = debug.FreeOSMemory
	pageOut      = pageOutProgram
)

// ReleaseStartAfter gives the memory the server's start used and no longer
// holds back to the system d from now (a collection and a scavenge, about
// 100 ms of CPU once, then a page-out of the program's file): building the
// API server's OpenAPI documents and filling the caches take far more heap
// than the server then keeps, and without this the runtime returns it only
// slowly, so an idle server just started holds tens of MiB it does not use;
// and of the code and tables the start ran through, an idle server uses
// about half again (pageOutProgram). The returned func cancels it.
func ReleaseStartAfter(d time.Duration) (cancel func() bool) {
	return time.AfterFunc(d, func() {
		freeOSMemory()
		// A kernel without MADV_PAGEOUT leaves the pages where they are:
		// nothing to tell.
		_, _ = pageOut()
	}).Stop
}
