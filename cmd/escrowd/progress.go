package main

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// eventProgress is the progress bar of a command that reads the event log
// (audit, rebuild): drawn on w from the first update, as a bar when the
// total is known (it may grow while the log does) and a spinner otherwise.
type eventProgress struct {
	w    io.Writer
	desc string
	bar  *progressbar.ProgressBar
}

func newEventProgress(w io.Writer, desc string) *eventProgress {
	return &eventProgress{w: w, desc: desc}
}

// update shows done of total events (total ≤ 0: unknown).
func (p *eventProgress) update(done, total int64) {
	if p.bar == nil {
		limit := total
		if limit <= 0 {
			limit = -1 // unknown: a spinner
		}
		p.bar = progressbar.NewOptions64(limit,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(p.desc),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("events"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
		)
	}
	if total <= 0 {
		_ = p.bar.Set64(done)
		return
	}
	if total > p.bar.GetMax64() {
		p.bar.ChangeMax64(total)
	}
	// Completion is finish's call: the log may still grow.
	_ = p.bar.Set64(min(done, p.bar.GetMax64()-1))
}

// finish completes the bar, or leaves it where it stopped after an error.
func (p *eventProgress) finish(err error) {
	if p.bar == nil {
		return
	}
	if err == nil {
		_ = p.bar.Finish()
	} else {
		_ = p.bar.Exit()
	}
}
