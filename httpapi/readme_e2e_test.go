package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's first session is run as a new user runs it: its commands,
// read from README.md between the first-session markers (the test keeps no
// copy of them), go to a real sh, whose curl talks HTTP to a fresh server
// with the service's default rate limit. Each curl's answer must be one JSON
// envelope matching the "# ->" line the README shows under it.

const (
	sessionStart = "<!-- first-session -->"
	sessionEnd   = "<!-- /first-session -->"
	// defaultRateLimit is serve's ESCROW_RATE_LIMIT_PER_MINUTE default
	// (10 requests a minute per key), which the session
	// must live with.
	defaultRateLimit = 10
	// spentBeforeSession are the standard key's requests made before the
	// session starts.
	spentBeforeSession = 5
)

// sessionStep is one command of the session and the answer the README
// shows for it ("" when it shows none).
type sessionStep struct {
	command, expect string
}

// readmeSession reads the README's first session: the variables it tells
// the user to export before it, and its steps.
func readmeSession(t *testing.T) (exports map[string]bool, steps []sessionStep) {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	before, rest, ok := strings.Cut(readme, sessionStart)
	section, _, ok2 := strings.Cut(rest, sessionEnd)
	if !ok || !ok2 {
		t.Fatalf("README.md has no section between %s and %s", sessionStart, sessionEnd)
	}
	exports = map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^export ([A-Z_]+)=`).FindAllStringSubmatch(before, -1) {
		exports[m[1]] = true
	}
	return exports, shownSteps(t, "README", section)
}

// shownSteps reads the commands of the sh code blocks of a document's
// section and, under each, the answer the document shows ("# ->").
func shownSteps(t *testing.T, doc, section string) (steps []sessionStep) {
	t.Helper()
	var lines []string
	inCode := false
	for _, l := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(l, "```"):
			inCode = !inCode
		case inCode:
			lines = append(lines, l)
		}
	}
	// Logical lines: a trailing backslash continues a command.
	var logical []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(lines[i])
		}
		logical = append(logical, l)
	}
	for _, l := range logical {
		trimmed := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trimmed, "# ->"):
			if len(steps) == 0 || steps[len(steps)-1].expect != "" {
				t.Fatalf("%s: an answer shown under no command: %s", doc, trimmed)
			}
			steps[len(steps)-1].expect = strings.TrimSpace(strings.TrimPrefix(trimmed, "# ->"))
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
		default:
			steps = append(steps, sessionStep{command: l})
		}
	}
	return steps
}

// TestReadmeFirstSession runs the README's first session against a fresh
// server and checks every answer, the merchant's final balance included.
func TestReadmeFirstSession(t *testing.T) {
	for _, tool := range []string{"sh", "curl", "base64", "grep", "cut", "tee", "head"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README's session needs %s (scripts/chromium.sh installs curl as root): %v", tool, err)
		}
	}
	exports, steps := readmeSession(t)
	for _, v := range []string{"SA", "STD", "API"} {
		if !exports[v] {
			t.Fatalf("the README does not tell the user to export %s before the session", v)
		}
	}
	var curls int
	used := regexp.MustCompile(`\$\{?([A-Z_][A-Z0-9_]*)`)
	assigned := map[string]bool{}
	for _, s := range steps {
		if name, _, ok := strings.Cut(s.command, "="); ok && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`).MatchString(name) {
			assigned[name] = true
		}
		for _, m := range used.FindAllStringSubmatch(s.command, -1) {
			if !exports[m[1]] && !assigned[m[1]] {
				t.Errorf("README: %s is neither exported before the session nor set in it: %s", m[1], s.command)
			}
		}
		if strings.Contains(s.command, "curl ") {
			curls++
			if s.expect == "" {
				t.Errorf("README: the session shows no answer for %s", s.command)
			}
		}
	}
	if curls < 10 || t.Failed() {
		t.Fatalf("README: %d curl commands in the first session", curls)
	}

	h := newHarness(t, func(c *Config) { c.RateLimitPerMinute = defaultRateLimit })
	// Whether the session alone reaches the limit depends on how fast the
	// machine runs it. A user who tried a few requests first, as the
	// block make run prints invites, has spent some of the standard key's
	// burst: so has the test, and the session meets 429s it must handle.
	for range spentBeforeSession {
		h.do(req{method: "GET", path: "/v1/customers", key: h.std()}).expect(t, 200, "Customers fetched successfully")
	}
	runShownSession(t, "README", steps, "SA="+h.sa(), "STD="+h.std(), "API="+h.srv.URL)
	if t.Failed() {
		return
	}
	// The last answer the README shows is the merchant's final balance;
	// the server agrees with it once the session is over.
	last := steps[len(steps)-1]
	if !strings.Contains(last.command, "/v1/merchant/balance") {
		t.Fatalf("the session does not end with the merchant's balance: %s", last.command)
	}
	r := h.do(req{method: "GET", path: "/v1/merchant/balance", key: h.sa()}).expect(t, 200, "Merchant balance fetched successfully")
	got, _ := json.Marshal(map[string]any{"status": 200, "message": r.Message, "data": r.Data})
	if err := matchShownAnswer(last.expect, string(got)); err != nil {
		t.Fatalf("the merchant's balance after the session is %s, the README says %s: %v", got, last.expect, err)
	}
}

// runShownSession runs a document's steps in one sh (in a fresh
// directory, with only env besides PATH and HOME) and checks each answer
// against the one the document shows.
func runShownSession(t *testing.T, doc string, steps []sessionStep, env ...string) {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -e\n")
	for i, s := range steps {
		fmt.Fprintf(&script, "printf '\\n@@step %d@@\\n'\n%s\n", i, s.command)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, "sh", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "LC_ALL=C"}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	runErr := cmd.Run()
	t.Logf("the session ran in %s", time.Since(started).Round(time.Millisecond))
	outputs := map[int]string{}
	parts := regexp.MustCompile(`(?m)^@@step (\d+)@@$`).Split(stdout.String(), -1)
	ids := regexp.MustCompile(`(?m)^@@step (\d+)@@$`).FindAllStringSubmatch(stdout.String(), -1)
	for i, m := range ids {
		var n int
		fmt.Sscan(m[1], &n)
		outputs[n] = strings.TrimSpace(parts[i+1])
	}
	if runErr != nil {
		t.Fatalf("the session failed after step %d (%v):\n%s\nstderr:\n%s", len(ids)-1, runErr, stdout.String(), stderr.String())
	}
	for i, s := range steps {
		out, ran := outputs[i]
		if !ran {
			t.Fatalf("step %d did not run: %s", i, s.command)
		}
		if s.expect == "" {
			if out != "" {
				t.Errorf("step %d printed what %s does not show: %s\n%s", i, doc, s.command, out)
			}
			continue
		}
		if err := matchShownAnswer(s.expect, out); err != nil {
			t.Errorf("step %d: %s\n%s shows: %s\nthe server answered: %s\n%v", i, s.command, doc, s.expect, out, err)
		}
	}
}

// anyValue stands for "…" in a shown answer: whatever the server put there.
const anyValue = "\x00any"

// matchShownAnswer checks that out is one JSON document and has what the
// README's shown answer has: every field it shows, with the value it shows
// ("…" for any value; ",…" for fields it leaves out).
func matchShownAnswer(shown, out string) error {
	pattern := strings.ReplaceAll(shown, `"…"`, `"\u0000any"`)
	pattern = strings.ReplaceAll(pattern, ",…", "")
	var want any
	dec := json.NewDecoder(strings.NewReader(pattern))
	dec.UseNumber()
	if err := dec.Decode(&want); err != nil {
		return fmt.Errorf("the README's answer is not JSON with … elisions: %w", err)
	}
	var got any
	dec = json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		return fmt.Errorf("not a JSON answer: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("more than one JSON answer (curl printed a refused attempt too?)")
	}
	return matchValue("", want, got)
}

func matchValue(at string, want, got any) error {
	switch w := want.(type) {
	case string:
		if w == anyValue {
			if got == nil {
				return fmt.Errorf("%s: null, the README shows a value", at)
			}
			return nil
		}
		if g, ok := got.(string); !ok || g != w {
			return fmt.Errorf("%s: %v, the README shows %q", at, got, w)
		}
	case json.Number:
		g, ok := got.(json.Number)
		wr, _ := new(big.Rat).SetString(w.String())
		if !ok {
			return fmt.Errorf("%s: %v, the README shows %s", at, got, w)
		}
		gr, _ := new(big.Rat).SetString(g.String())
		if wr == nil || gr == nil || wr.Cmp(gr) != 0 {
			return fmt.Errorf("%s: %s, the README shows %s", at, g, w)
		}
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v, the README shows an object", at, got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s.%s: absent, the README shows it", at, k)
			}
			if err := matchValue(at+"."+k, wv, gv); err != nil {
				return err
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: %v, the README shows %d items", at, got, len(w))
		}
		for i := range w {
			if err := matchValue(fmt.Sprintf("%s[%d]", at, i), w[i], g[i]); err != nil {
				return err
			}
		}
	default:
		if fmt.Sprint(want) != fmt.Sprint(got) {
			return fmt.Errorf("%s: %v, the README shows %v", at, got, want)
		}
	}
	return nil
}

// The README tells a second terminal how to reach the checkout's
// throwaway database, which every operator command needs (without it they all fail
// with "DATABASE_URL is not set").
func TestReadmeTellsTheSecondTerminalItsDatabase(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "export DATABASE_URL=$(scripts/pg.sh url)") {
		t.Fatal("README.md does not show `export DATABASE_URL=$(scripts/pg.sh url)` for a second terminal")
	}
}
