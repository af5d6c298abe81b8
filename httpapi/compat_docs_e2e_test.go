package httpapi

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// docs/migrating.md keeps each example in a marked section, and each
// section is run by a test: the session below, the webhook handler by
// TestPublishedClientsRunUnchanged, the operator commands by the escrowd
// command's tests (cmd/escrowd).
const migratingDoc = "../docs/migrating.md"

var migratingSections = []string{"migrating-session", "migrating-webhook-handler", "migrating-operator"}

// migratingSection is the text between <!-- name --> and <!-- /name -->.
func migratingSection(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(migratingDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "<!-- "+name+" -->")
	section, _, ok2 := strings.Cut(rest, "<!-- /"+name+" -->")
	if !ok || !ok2 {
		t.Fatalf("%s has no section %s", migratingDoc, name)
	}
	return section
}

// codeBlock is the body of the one fenced code block of section.
func codeBlock(t *testing.T, section string) string {
	t.Helper()
	m := regexp.MustCompile("(?s)```[a-z]*\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(m) != 1 {
		t.Fatalf("%d code blocks in a section of %s, want 1", len(m), migratingDoc)
	}
	return m[0][1]
}

// TestMigratingGuideBlocksAreAllTested: every code block of the guide lies
// in a section a test runs.
func TestMigratingGuideBlocksAreAllTested(t *testing.T) {
	raw, err := os.ReadFile(migratingDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, name := range migratingSections {
		codeBlock(t, migratingSection(t, name))
		doc = strings.Replace(doc, migratingSection(t, name), "", 1)
	}
	if strings.Contains(doc, "```") {
		t.Fatalf("%s has a code block outside the tested sections", migratingDoc)
	}
}

// TestMigratingGuideSession runs the guide's session as a user would, in
// sh with curl against a fresh server, and checks every answer it shows.
func TestMigratingGuideSession(t *testing.T) {
	h := newHarness(t)
	steps := shownSteps(t, migratingDoc, migratingSection(t, "migrating-session"))
	if len(steps) < 6 {
		t.Fatalf("%d steps in the guide's session", len(steps))
	}
	runShownSession(t, migratingDoc, steps, "SA="+h.sa(), "STD="+h.std(), "API="+h.srv.URL)
}
