package channels

import (
	"sync"
	"time"
)

// A paired person may send ten messages at once, then twenty a minute
// (ref 9.8); one over is dropped and they are told so once, not at every
// message of a flood.
const (
	BucketBurst     = 10
	BucketPerMinute = 20
)

// Bucket is a token bucket per person.
type Bucket struct {
	mu     sync.Mutex
	people map[string]*bucketState
}

type bucketState struct {
	tokens float64
	at     time.Time
	told   bool
}

// Take takes one message of person's at now: ok says it may go on, tell
// that it may not and this is the first refusal since they last had room,
// so the person is told once.
func (b *Bucket) Take(person string, now time.Time) (ok, tell bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.people == nil {
		b.people = map[string]*bucketState{}
	}
	s := b.people[person]
	if s == nil {
		s = &bucketState{tokens: BucketBurst, at: now}
		b.people[person] = s
	}
	if elapsed := now.Sub(s.at); elapsed > 0 {
		s.tokens = min(BucketBurst, s.tokens+elapsed.Minutes()*BucketPerMinute)
		s.at = now
	}
	if s.tokens >= 1 {
		s.tokens--
		s.told = false
		return true, false
	}
	tell = !s.told
	s.told = true
	return false, tell
}

// Forget drops a person's bucket (unpaired): a bucket per stranger is
// never made, since strangers are dropped before the bucket is asked.
func (b *Bucket) Forget(person string) {
	b.mu.Lock()
	delete(b.people, person)
	b.mu.Unlock()
}
