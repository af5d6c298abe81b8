package httpapi

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

const (
	tourStart = "<!-- api-tour -->"
	tourEnd   = "<!-- /api-tour -->"
)

// TestAPITourRuns runs every block of docs/api-tour.md, in order, in one
// sh against a fresh server with the variables the README's second
// terminal has, and checks each answer against the one the tour shows.
// The server has no rate limit, as under make run (the README's session
// proves the retries under the default limit); every variable a command
// uses is exported or set by an earlier command, and every request shows
// its answer.
func TestAPITourRuns(t *testing.T) {
	raw, err := os.ReadFile("../docs/api-tour.md")
	if err != nil {
		t.Fatal(err)
	}
	var steps []sessionStep
	rest := string(raw)
	for {
		_, after, ok := strings.Cut(rest, tourStart)
		if !ok {
			break
		}
		section, tail, ok := strings.Cut(after, tourEnd)
		if !ok {
			t.Fatalf("docs/api-tour.md: %s without %s", tourStart, tourEnd)
		}
		steps = append(steps, shownSteps(t, "docs/api-tour.md", section)...)
		rest = tail
	}
	if strings.Count(string(raw), "```sh") != strings.Count(string(raw), tourStart) {
		t.Fatal("docs/api-tour.md has an sh block outside the markers the test runs")
	}
	known := map[string]bool{"SA": true, "STD": true, "API": true}
	used := regexp.MustCompile(`\$\{?([A-Z_][A-Z0-9_]*)`)
	assign := regexp.MustCompile(`^([A-Z_][A-Z0-9_]*)=`)
	requests := 0
	for _, s := range steps {
		if m := assign.FindStringSubmatch(s.command); m != nil {
			known[m[1]] = true
		}
		for _, m := range used.FindAllStringSubmatch(s.command, -1) {
			if !known[m[1]] {
				t.Errorf("docs/api-tour.md: %s is set by no earlier command: %s", m[1], s.command)
			}
		}
		if strings.HasPrefix(s.command, "api ") {
			requests++
			if s.expect == "" {
				t.Errorf("docs/api-tour.md shows no answer for %s", s.command)
			}
		}
	}
	if requests < 20 || t.Failed() {
		t.Fatalf("docs/api-tour.md: %d requests", requests)
	}
	h := newHarness(t, func(c *Config) { c.RateLimitPerMinute = 0 })
	runShownSession(t, "docs/api-tour.md", steps, "SA="+h.sa(), "STD="+h.std(), "API="+h.srv.URL)
}
