package webhooks

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// admState is an admission's state for a table case: limits workers 8,
// perMerchant 3, slowPerMerchant 1, slowShare 2, and the slow merchants
// given the share in name order.
type admState struct {
	busy         map[string]int
	slow, prompt []string
	more         bool
	leasing      bool
	endedInLease bool
	leaseN       int
	leaseRooms   map[string]int
	reservedAgo  time.Duration // 0: never
	running      bool
}

var admNow = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func (s admState) build() *admission {
	ad := newAdmission(8, 3, 1, 2)
	ad.shuffle = slices.Sort[[]string]
	maps.Copy(ad.busy, s.busy)
	for _, m := range s.slow {
		ad.slow[m] = true
	}
	for _, m := range s.prompt {
		ad.prompt[m] = true
	}
	ad.more, ad.leasing, ad.endedInLease = s.more, s.leasing, s.endedInLease
	ad.leaseN, ad.leaseRooms = s.leaseN, maps.Clone(s.leaseRooms)
	if s.reservedAgo > 0 {
		ad.reservedAt = admNow.Add(-s.reservedAgo)
	}
	ad.running = s.running
	return &ad
}

func leasedOf(ms ...string) []leasedAttempt {
	out := make([]leasedAttempt, len(ms))
	for i, m := range ms {
		out[i] = leasedAttempt{MerchantID: m}
	}
	return out
}

func TestAdmissionLeaseSize(t *testing.T) {
	tests := []struct {
		name string
		st   admState
		want int
	}{
		{"every free worker", admState{busy: map[string]int{"a": 3}}, 5},
		{"no worker free", admState{busy: map[string]int{"a": 3, "b": 3, "c": 2}}, 0},
		{"half while a subscriber hands over", admState{busy: map[string]int{"a": 3}, reservedAgo: time.Second}, 3},
		{"all while a backlog is leased", admState{busy: map[string]int{"a": 3}, reservedAgo: time.Second, more: true}, 5},
		{"one free worker is not halved", admState{busy: map[string]int{"a": 7}, reservedAgo: time.Second}, 1},
		{"all once the subscriber went quiet", admState{reservedAgo: handOffQuiet}, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.st.build().leaseSize(admNow); got != tt.want {
				t.Fatalf("leaseSize %d, want %d", got, tt.want)
			}
		})
	}
	big := newAdmission(4*maxLease, 1, 1, 1)
	if got := big.leaseSize(admNow); got != maxLease {
		t.Fatalf("leaseSize with %d free workers: %d, want maxLease %d", 4*maxLease, got, maxLease)
	}
}

func TestAdmissionLeaseDone(t *testing.T) {
	tests := []struct {
		name      string
		st        admState
		n         int
		got       []leasedAttempt
		starved   bool
		wantAgain bool
		wantMore  bool
		wantBusy  map[string]int
	}{
		{"full lease: again", admState{}, 2, leasedOf("a", "b"), false, true, true, map[string]int{"a": 1, "b": 1}},
		{"short lease: wait", admState{busy: map[string]int{"a": 1}}, 3, leasedOf("a"), false, false, false, map[string]int{"a": 2}},
		{"starved, nothing ended: wait", admState{}, 3, leasedOf("a"), true, false, false, map[string]int{"a": 1}},
		{"starved, an attempt ended meanwhile: again", admState{endedInLease: true}, 3, leasedOf("a"), true, true, false, map[string]int{"a": 1}},
		{"ended meanwhile, not starved: wait", admState{endedInLease: true}, 3, nil, false, false, false, map[string]int{}},
		{"no worker free: the next end wakes", admState{}, 0, nil, false, false, true, map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad := tt.st.build()
			ad.leaseStarted(tt.n)
			ad.endedInLease = tt.st.endedInLease
			again := ad.leaseDone(tt.n, tt.got, tt.starved)
			if again != tt.wantAgain || ad.more != tt.wantMore || !maps.Equal(ad.busy, tt.wantBusy) {
				t.Fatalf("again %v more %v busy %v, want %v %v %v", again, ad.more, ad.busy, tt.wantAgain, tt.wantMore, tt.wantBusy)
			}
			if ad.leasing || ad.leaseN != 0 || ad.leaseRooms != nil {
				t.Fatalf("lease still recorded: leasing %v n %d rooms %v", ad.leasing, ad.leaseN, ad.leaseRooms)
			}
		})
	}
}

func TestAdmissionAttemptEnded(t *testing.T) {
	tests := []struct {
		name      string
		st        admState
		merchant  string
		rose      bool
		wantWake  bool
		wantBusy  map[string]int
		wantEnded bool
	}{
		{"below its cap: nobody", admState{busy: map[string]int{"p": 2}, prompt: []string{"p"}}, "p", false, false, map[string]int{"p": 1}, false},
		{"at its cap: room back", admState{busy: map[string]int{"p": 3}, prompt: []string{"p"}}, "p", false, true, map[string]int{"p": 2}, false},
		{"unknown at its cap of 1", admState{busy: map[string]int{"u": 1}}, "u", false, true, map[string]int{}, false},
		{"slow: the share back", admState{busy: map[string]int{"s": 1, "p": 1}, slow: []string{"s"}, prompt: []string{"p"}}, "s", false, true, map[string]int{"p": 1}, false},
		{"its cap rose", admState{busy: map[string]int{"p": 1}, prompt: []string{"p"}}, "p", true, true, map[string]int{}, false},
		{"a lease was cut short", admState{busy: map[string]int{"p": 1}, prompt: []string{"p"}, more: true}, "p", false, true, map[string]int{}, false},
		{"during a lease: counted", admState{busy: map[string]int{"p": 2}, prompt: []string{"p"}, leasing: true}, "p", false, false, map[string]int{"p": 1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad := tt.st.build()
			wake := ad.attemptEnded(tt.merchant, tt.rose)
			if wake != tt.wantWake || !maps.Equal(ad.busy, tt.wantBusy) || ad.endedInLease != tt.wantEnded {
				t.Fatalf("wake %v busy %v endedInLease %v, want %v %v %v", wake, ad.busy, ad.endedInLease, tt.wantWake, tt.wantBusy, tt.wantEnded)
			}
		})
	}
}

func TestAdmissionReserve(t *testing.T) {
	tests := []struct {
		name     string
		st       admState
		msgs     []string
		want     []bool
		wantBusy map[string]int
	}{
		{"not running: nothing", admState{prompt: []string{"a"}}, []string{"a"}, nil, map[string]int{}},
		{"only prompt merchants, not slow", admState{running: true, prompt: []string{"a", "s"}, slow: []string{"s"}},
			[]string{"a", "s", "u"}, []bool{true, false, false}, map[string]int{"a": 1}},
		{"within perMerchant", admState{running: true, prompt: []string{"a"}, busy: map[string]int{"a": 1}},
			[]string{"a", "a", "a"}, []bool{true, true, false}, map[string]int{"a": 3}},
		{"within workers", admState{running: true, prompt: []string{"a", "b", "c"}, busy: map[string]int{"x": 3, "y": 3}},
			[]string{"a", "b", "c"}, []bool{true, true, false}, map[string]int{"x": 3, "y": 3, "a": 1, "b": 1}},
		{"beside a lease under way", admState{running: true, prompt: []string{"a", "b"}, leasing: true, leaseN: 6, leaseRooms: map[string]int{"a": 3}},
			[]string{"a", "b", "b", "b"}, []bool{false, true, true, false}, map[string]int{"b": 2}},
		{"a lease's n counts only while it runs", admState{running: true, prompt: []string{"b"}, leaseN: 5},
			[]string{"b", "b", "b"}, []bool{true, true, true}, map[string]int{"b": 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad := tt.st.build()
			msgs := make([]Message, len(tt.msgs))
			for i, m := range tt.msgs {
				msgs[i] = Message{MerchantID: m}
			}
			take := ad.reserve(admNow, msgs)
			if !slices.Equal(take, tt.want) || !maps.Equal(ad.busy, tt.wantBusy) {
				t.Fatalf("take %v busy %v, want %v %v", take, ad.busy, tt.want, tt.wantBusy)
			}
			if handing := ad.handingOff(admNow); handing != tt.st.running {
				t.Fatalf("handing off %v after a request while running %v", handing, tt.st.running)
			}
		})
	}
}

func TestAdmissionRooms(t *testing.T) {
	tests := []struct {
		name      string
		st        admState
		rows      map[string]int
		wantFull  []string
		wantRooms map[string]int
	}{
		{"caps less in flight",
			admState{busy: map[string]int{"p": 1, "u": 1}, prompt: []string{"p"}},
			map[string]int{"p": 9, "q": 9},
			[]string{"u"}, map[string]int{"p": 2, "q": 1}},
		{"the slow share, in shuffle order, as far as rows go",
			admState{slow: []string{"s1", "s2", "s3"}},
			map[string]int{"s1": 1, "s2": 5, "s3": 5},
			nil, map[string]int{"s1": 1, "s2": 1, "s3": 0}},
		{"a slow merchant's own cap",
			admState{busy: map[string]int{"s1": 1}, slow: []string{"s1", "s2"}},
			map[string]int{"s2": 5},
			[]string{"s1"}, map[string]int{"s2": 1}},
		{"the share taken: every slow merchant in flight is full",
			admState{busy: map[string]int{"s1": 1, "s2": 1}, slow: []string{"s1", "s2", "s3"}},
			map[string]int{"s3": 5},
			[]string{"s1", "s2"}, map[string]int{"s3": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad := tt.st.build()
			ad.leaseStarted(8)
			a := ad.allot()
			full := slices.Sorted(slices.Values(a.full))
			rooms := a.rooms(tt.rows)
			if !slices.Equal(full, tt.wantFull) || !maps.Equal(rooms, tt.wantRooms) {
				t.Fatalf("full %v rooms %v, want %v %v", full, rooms, tt.wantFull, tt.wantRooms)
			}
			if !maps.Equal(ad.leaseRooms, tt.wantRooms) {
				t.Fatalf("recorded for reserve %v, want %v", ad.leaseRooms, tt.wantRooms)
			}
		})
	}
}

// TestAdmissionLeasePicked: once the window has chosen, the lease keeps
// only what it picked, in all and per merchant.
func TestAdmissionLeasePicked(t *testing.T) {
	ad := admState{running: true, prompt: []string{"a", "b"}}.build()
	ad.leaseStarted(8)
	ad.allot().rooms(map[string]int{"a": 3, "b": 3})
	ad.windowPicked(map[string]int{"a": 1})
	if ad.leaseN != 1 || !maps.Equal(ad.leaseRooms, map[string]int{"a": 1}) {
		t.Fatalf("after the pick: n %d rooms %v, want 1 and a:1", ad.leaseN, ad.leaseRooms)
	}
	take := ad.reserve(admNow, []Message{{MerchantID: "a"}, {MerchantID: "a"}, {MerchantID: "a"}, {MerchantID: "b"}})
	if want := []bool{true, true, false, true}; !slices.Equal(take, want) {
		t.Fatalf("take %v, want %v", take, want)
	}
}
