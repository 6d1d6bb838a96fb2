package memlimit

import (
	"math"
	"runtime"
	"testing"
	"time"
)

// fakeTuner is a Tuner on a fake clock and fake runtime figures, with the
// limits it set recorded instead of given to the runtime. Each afterGC
// follows an automatic collection (see fakeRuntime).
func fakeTuner(live, outside uint64) (*Tuner, *time.Time, *[]int64) {
	tu, clock, set, _ := fakeTunerWith(figures{live: live, outsideHeap: outside})
	return tu, clock, set
}

// fakeRuntime counts the fake collections: each read follows an automatic
// one, unless forcedNext says the tuner's own release forced it.
type fakeRuntime struct {
	figures
	forcedNext bool
}

func (r *fakeRuntime) read() figures {
	if !r.forcedNext {
		r.automatic++
	}
	r.forcedNext = false
	return r.figures
}

func fakeTunerWith(f figures) (*Tuner, *time.Time, *[]int64, *fakeRuntime) {
	clock := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	var set []int64
	rt := &fakeRuntime{figures: f}
	t := &Tuner{
		now:  func() time.Time { return clock },
		read: rt.read,
		set:  func(l int64) int64 { set = append(set, l); return 0 },
		// A release is never due on its own in these tests (see
		// TestABurstsHeapGoesBackOnceItIsOver, which calls it).
		release: func() {},
		after:   func(time.Duration, func()) *time.Timer { return time.NewTimer(time.Hour) },
	}
	t.lastGC.Store(clock.UnixNano())
	t.automatic.Store(rt.automatic)
	t.limit.Store(math.MaxInt64)
	return t, &clock, &set, rt
}

func TestTheLimitFollowsTheLiveHeapWhenIdleAndLiftsWhenBusy(t *testing.T) {
	tu, clock, set := fakeTuner(100<<20, 20<<20)

	// A collection a second after the last: busy, no limit (none was set).
	*clock = clock.Add(time.Second)
	tu.afterGC()
	if tu.Limit() != math.MaxInt64 || len(*set) != 0 {
		t.Fatalf("busy: limit %d, set %v; want none", tu.Limit(), *set)
	}
	// Two minutes later: idle, live + a tenth + the runtime's own.
	*clock = clock.Add(2 * time.Minute)
	tu.afterGC()
	want := int64(110<<20 + 20<<20)
	if tu.Limit() != want {
		t.Errorf("idle: limit = %d MiB, want %d MiB", tu.Limit()>>20, want>>20)
	}
	// Again idle with the same heap: nothing set twice.
	*clock = clock.Add(2 * time.Minute)
	tu.afterGC()
	if len(*set) != 1 {
		t.Errorf("set %d times, want once for one idle limit", len(*set))
	}
	// Work again: the limit is lifted.
	*clock = clock.Add(200 * time.Millisecond)
	tu.afterGC()
	if tu.Limit() != math.MaxInt64 || (*set)[len(*set)-1] != math.MaxInt64 {
		t.Errorf("busy again: limit = %d, want lifted", tu.Limit())
	}
	tu.Stop()
}

func TestATinyHeapGetsTheFloor(t *testing.T) {
	tu, clock, _ := fakeTuner(1<<20, 1<<20)
	*clock = clock.Add(time.Minute)
	tu.afterGC()
	if tu.Limit() != floor {
		t.Errorf("limit = %d, want the floor %d", tu.Limit(), floor)
	}
}

func TestGOMEMLIMITInTheEnvironmentTurnsTheTunerOff(t *testing.T) {
	t.Setenv(EnvVar, "200MiB")
	if tu := Start(); tu != nil {
		tu.Stop()
		t.Fatal("Start() tuned although GOMEMLIMIT is set")
	}
}

func TestTheRealTunerRunsAfterCollections(t *testing.T) {
	tu := Start()
	if tu == nil {
		t.Skip("GOMEMLIMIT is set in this environment")
	}
	defer tu.Stop()
	tu.lastGC.Store(time.Now().Add(-time.Minute).UnixNano()) // the next collection finds it idle
	for range 20 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		if tu.Limit() != math.MaxInt64 {
			break
		}
	}
	if tu.Limit() == math.MaxInt64 || tu.Limit() < floor {
		t.Fatalf("after collections the limit is %d; want one set from the live heap", tu.Limit())
	}
	if f := readRuntime(); f.live == 0 || f.outsideHeap == 0 {
		t.Errorf("readRuntime() = %+v; want the live heap and the runtime's own memory above 0", f)
	}
}

func TestReleaseStartAfterFreesOnceAfterTheDelay(t *testing.T) {
	freed, pagedOut := make(chan struct{}, 2), make(chan struct{}, 2)
	defer func(f func(), p func() (int64, error)) { freeOSMemory, pageOut = f, p }(freeOSMemory, pageOut)
	freeOSMemory = func() { freed <- struct{}{} }
	pageOut = func() (int64, error) { pagedOut <- struct{}{}; return 0, nil }
	ReleaseStartAfter(20 * time.Millisecond)
	for what, done := range map[string]chan struct{}{"the heap the start used": freed, "the program's pages": pagedOut} {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s were not released", what)
		}
	}
	cancel := ReleaseStartAfter(time.Hour)
	if !cancel() {
		t.Error("a release not yet run could not be cancelled")
	}
}

// After a busy spell, the heap it grew goes back once no collection has come
// for idleGap: an idle server's next collection may be two minutes away.
func TestABurstsHeapGoesBackOnceItIsOver(t *testing.T) {
	tu, clock, _ := fakeTuner(100<<20, 20<<20)
	released := 0
	tu.release = func() { released++ }
	var due func()
	var delay time.Duration
	tu.after = func(d time.Duration, f func()) *time.Timer {
		delay, due = d, f
		return time.NewTimer(time.Hour) // fired by hand below
	}

	// Idle collections put nothing off.
	*clock = clock.Add(2 * time.Minute)
	tu.afterGC()
	if due != nil {
		t.Fatal("an idle collection scheduled a release")
	}
	// A busy one does, idleGap ahead.
	*clock = clock.Add(time.Second)
	tu.afterGC()
	if due == nil || delay != idleGap {
		t.Fatalf("a busy collection scheduled %v after %s; want a release after %s", due != nil, delay, idleGap)
	}
	// Another collection came before it was due: nothing yet.
	*clock = clock.Add(time.Second)
	tu.lastGC.Store(clock.UnixNano())
	*clock = clock.Add(idleGap / 2)
	due()
	if released != 0 {
		t.Fatalf("released %d times while collections still came", released)
	}
	// None came for idleGap: the heap goes back, once.
	*clock = clock.Add(idleGap)
	due()
	if released != 1 {
		t.Fatalf("released %d times after a quiet idleGap; want 1", released)
	}
	// A stopped tuner releases nothing.
	tu.Stop()
	due()
	if released != 1 {
		t.Errorf("a stopped tuner released")
	}
}

// The tuner's own release forces a collection; that is no sign of work. When
// it counted as one, every release put off the next, and an idle server
// collected and paged its program out every idleGap for ever.
func TestAReleasesOwnCollectionSchedulesNoOther(t *testing.T) {
	tu, clock, _, rt := fakeTunerWith(figures{live: 40 << 20, unused: 6 << 20, outsideHeap: 20 << 20})
	scheduled := 0
	tu.after = func(time.Duration, func()) *time.Timer {
		scheduled++
		return time.NewTimer(time.Hour)
	}
	// A busy spell: one release scheduled.
	*clock = clock.Add(time.Second)
	tu.afterGC()
	if scheduled != 1 {
		t.Fatalf("a busy collection scheduled %d releases; want 1", scheduled)
	}
	// The release, idleGap later, forces a collection, and the runtime may
	// run one more right after: neither is work.
	*clock = clock.Add(idleGap)
	rt.forcedNext = true
	tu.afterGC()
	want := int64(40<<20 + minHeadroom + 6<<20 + 20<<20)
	if tu.Limit() != want {
		t.Errorf("after the release's collection the limit is %d MiB; want the idle limit %d MiB", tu.Limit()>>20, want>>20)
	}
	*clock = clock.Add(50 * time.Millisecond)
	rt.forcedNext = true
	tu.afterGC()
	if scheduled != 1 {
		t.Errorf("the release's own collections scheduled %d more releases; want none", scheduled-1)
	}
	// The runtime's next automatic one, long after the last automatic:
	// idle, nothing scheduled, the limit kept.
	*clock = clock.Add(2 * time.Minute)
	tu.afterGC()
	if scheduled != 1 || tu.Limit() != want {
		t.Errorf("an idle automatic collection: %d releases scheduled, limit %d MiB; want 1 and %d MiB", scheduled, tu.Limit()>>20, want>>20)
	}
}

// The idle limit leaves room for the heap's slack within its spans, which
// the scavenger cannot give back: without it the limit sat just above the
// heap after a release, the next allocations forced an automatic collection
// at once, and the server seemed busy. Above the live heap and the slack it
// leaves a tenth of the live heap, and never less than minHeadroom.
func TestTheIdleLimitCountsTheHeapsSlack(t *testing.T) {
	for _, tc := range []struct {
		f    figures
		want int64
	}{
		{figures{live: 40 << 20, unused: 8 << 20, outsideHeap: 16 << 20}, 40<<20 + minHeadroom + 8<<20 + 16<<20},
		{figures{live: 200 << 20, unused: 8 << 20, outsideHeap: 16 << 20}, 220<<20 + 8<<20 + 16<<20},
	} {
		if got := idleLimit(tc.f); got != tc.want {
			t.Errorf("idleLimit(%+v) = %d MiB, want %d MiB", tc.f, got>>20, tc.want>>20)
		}
	}
}
