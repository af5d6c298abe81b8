package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The repository's prose stands alone: a newcomer reads the README in
// minutes, follows every link, and meets no path outside the repository,
// no date and no reference to a work log, in the docs or in the code's
// comments (history lives in git).

const repoRoot = "../.."

// readmeMaxLines bounds the README: a quick start, with everything else in
// docs/.
const readmeMaxLines = 200

var (
	// outside names what a reader of the repository does not have: the
	// team's own specification files and their section sign (spelled with
	// character classes, so the pattern is not itself such a name).
	outside = regexp.MustCompile(`\.\.[/]shared[/]|shared[/]spec|api[-]decisions|service[-]spec|\x{00A7}`)
	// workLog is a reference to the story of a change.
	workLog = regexp.MustCompile(`(?i)\b(sessions? \d+|issues? \d+|issue \d+'s|waves? \d+|wave of)\b|\b(session|issue) #\d+`)
	// dated is a calendar date written out, as a diary writes it.
	dated = regexp.MustCompile(`\b\d{1,2} (January|February|March|April|May|June|July|August|September|October|November|December) 20\d\d\b`)
	// isoDate is a date in prose (outside code blocks and inline code).
	isoDate = regexp.MustCompile(`\b20\d\d-\d\d-\d\d\b`)
	// migrationRef names a migration file by number.
	migrationRef = regexp.MustCompile(`(?i)\bmigrations? (\d{4})\b`)
	mdLink       = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
)

// markdownFiles are the repository's documents.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md"}
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	for _, d := range docs {
		files = append(files, strings.TrimPrefix(d, repoRoot+"/"))
	}
	return files
}

// prose is a document without its code blocks and inline code.
func prose(doc string) string {
	var out []string
	in := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			out = append(out, "")
			continue
		}
		if in {
			out = append(out, "")
			continue
		}
		out = append(out, regexp.MustCompile("`[^`]*`").ReplaceAllString(l, "``"))
	}
	return strings.Join(out, "\n")
}

func TestReadmeIsAQuickStart(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n > readmeMaxLines {
		t.Fatalf("README.md has %d lines; a quick start has at most %d (move the rest to docs/)", n, readmeMaxLines)
	}
}

func TestDocsStandAlone(t *testing.T) {
	for _, f := range markdownFiles(t) {
		raw, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		doc := string(raw)
		for i, l := range strings.Split(doc, "\n") {
			for _, re := range []*regexp.Regexp{outside, workLog, dated} {
				if m := re.FindString(l); m != "" {
					t.Errorf("%s:%d: %q: %s", f, i+1, m, l)
				}
			}
		}
		for i, l := range strings.Split(prose(doc), "\n") {
			if m := isoDate.FindString(l); m != "" {
				t.Errorf("%s:%d: a date in prose, %q: %s", f, i+1, m, l)
			}
		}
		for _, m := range mdLink.FindAllStringSubmatch(prose(doc), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := filepath.Join(repoRoot, filepath.Dir(f), target)
			rel, err := filepath.Rel(repoRoot, path)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s: a link outside the repository: %s", f, target)
				continue
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: a broken link: %s", f, target)
			}
		}
	}
}

// TestCommentsTellNoHistory: Go comments (tests included), the Makefile
// and scripts say what and why: no work-log references, no
// dates written as a diary does, no paths outside the repository, and a
// migration named by number is a file that exists.
func TestCommentsTellNoHistory(t *testing.T) {
	migrations := map[string]bool{}
	sqls, _ := filepath.Glob(filepath.Join(repoRoot, "migrations", "*.sql"))
	for _, s := range sqls {
		migrations[filepath.Base(s)[:4]] = true
	}
	check := func(where, text string) {
		for _, re := range []*regexp.Regexp{outside, workLog, dated} {
			if m := re.FindString(text); m != "" {
				t.Errorf("%s: %q", where, m)
			}
		}
		for _, m := range migrationRef.FindAllStringSubmatch(text, -1) {
			if !migrations[m[1]] {
				t.Errorf("%s: names migration %s, which does not exist: %s", where, m[1], strings.TrimSpace(text))
			}
		}
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, ".go"):
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, cg := range f.Comments {
				for _, c := range cg.List {
					check(rel+":"+strconv.Itoa(fset.Position(c.Pos()).Line), c.Text)
				}
			}
		// Applied migrations are left out: each is recorded with its
		// SHA-256, and migrate refuses a file edited since.
		case d.Name() == "Makefile" || strings.HasSuffix(path, ".sh"):
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, l := range strings.Split(string(raw), "\n") {
				if c := strings.TrimSpace(l); strings.HasPrefix(c, "#") || strings.HasPrefix(c, "--") {
					check(rel+":"+strconv.Itoa(i+1), l)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
