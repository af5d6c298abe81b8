package sealing

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

type destroys struct{ n uint64 }

func (d *destroys) Destroys() uint64 { return d.n }

// The cache keeps an event's opened data no longer than a data key is
// kept, drops everything when a key is destroyed in this process, and
// keeps nothing opened while one was.
func TestOpenCacheBounds(t *testing.T) {
	d := &destroys{}
	now := time.Unix(1_800_000_000, 0)
	c := &openCache{keys: d, ttl: time.Minute, now: func() time.Time { return now }, entries: map[uuid.UUID]openedEntry{}}
	a, b := uuid.New(), uuid.New()
	c.put(a, []byte("a"), c.epochNow())
	if got, ok := c.get(a); !ok || string(got) != "a" {
		t.Fatalf("kept %q %v", got, ok)
	}
	now = now.Add(time.Minute)
	if _, ok := c.get(a); ok {
		t.Fatal("kept past the key cache's time")
	}
	c.put(a, []byte("a"), c.epochNow())
	d.n++
	if _, ok := c.get(a); ok {
		t.Fatal("kept after a key was destroyed")
	}
	epoch := c.epochNow()
	d.n++ // a key destroyed while b was being opened
	c.put(b, []byte("b"), epoch)
	if _, ok := c.get(b); ok {
		t.Fatal("kept what was opened while a key was destroyed")
	}
	for i := range openCacheSize + 1 {
		c.put(uuid.New(), []byte{byte(i)}, c.epochNow())
	}
	if len(c.entries) != openCacheSize || len(c.order) != openCacheSize {
		t.Fatalf("%d entries, %d in order; want at most %d", len(c.entries), len(c.order), openCacheSize)
	}
}
