package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The benchmark commands the docs print run as written: every package they
// name exists, every -bench pattern selects a benchmark of that package,
// every -benchtime is one go test takes, and every environment variable
// they set is one the benchmarks (or make bench) read. Running them is the
// benchmarks' job; this catches the command that a rename left behind.

// makeBenchVars are the variables `make bench` itself reads.
var makeBenchVars = map[string]bool{"BENCH": true, "BENCHTIME": true, "DATABASE_URL": true}

// benchCommand is one documented benchmark run.
type benchCommand struct {
	doc, line string
	pkg       string // directory relative to the repository
	pattern   string // -bench, "" for every benchmark
	benchtime string
	env       []string // variables the command sets
}

func TestDocumentedBenchmarkCommandsRun(t *testing.T) {
	cmds := documentedBenchCommands(t)
	if len(cmds) < 10 {
		t.Fatalf("found only %d benchmark commands in the docs: is the parser still reading them?", len(cmds))
	}
	benchmarks := map[string][]string{}
	sources := map[string]string{}
	for _, c := range cmds {
		if _, ok := benchmarks[c.pkg]; !ok {
			benchmarks[c.pkg], sources[c.pkg] = benchmarksOf(t, c.pkg)
		}
		if len(benchmarks[c.pkg]) == 0 {
			t.Errorf("%s: %q runs package %s, which has no benchmarks", c.doc, c.line, c.pkg)
			continue
		}
		if c.pattern != "" {
			top := strings.SplitN(c.pattern, "/", 2)[0]
			for _, alt := range strings.Split(top, "|") {
				re, err := regexp.Compile(alt)
				if err != nil {
					t.Errorf("%s: %q: pattern %q: %v", c.doc, c.line, alt, err)
					continue
				}
				if !anyMatch(re, benchmarks[c.pkg]) {
					t.Errorf("%s: %q: %q selects no benchmark of %s", c.doc, c.line, alt, c.pkg)
				}
			}
		}
		if c.benchtime != "" && !validBenchtime(c.benchtime) {
			t.Errorf("%s: %q: -benchtime %q is not a count (100x) or a duration", c.doc, c.line, c.benchtime)
		}
		for _, v := range c.env {
			if !makeBenchVars[v] && !strings.Contains(sources[c.pkg], strconv.Quote(v)) {
				t.Errorf("%s: %q sets %s, which nothing in %s reads", c.doc, c.line, v, c.pkg)
			}
		}
	}
}

// TestBenchCommandParser pins the reading of each shape the docs use.
func TestBenchCommandParser(t *testing.T) {
	cases := []struct {
		block string
		want  []benchCommand
	}{
		{"BENCH='A|B/c=1' BENCHTIME=20s make bench\n", []benchCommand{{pkg: "bench", pattern: "A|B/c=1", benchtime: "20s", env: []string{"BENCH", "BENCHTIME"}}}},
		{"SCALE_EVENTS=5 make bench BENCH=Scale   # a quick look\n", []benchCommand{{pkg: "bench", pattern: "Scale", env: []string{"SCALE_EVENTS", "BENCH"}}}},
		{"go test -run '^$' -bench 'X' -benchtime 5s -count 2 ./webhooks/\n", []benchCommand{{pkg: "webhooks", pattern: "X", benchtime: "5s"}}},
		{"go test -c -o /tmp/b.X ./bench/   # then\n/tmp/b.X -test.run '^$' -test.bench 'Y/z' -test.benchtime 30x\n",
			[]benchCommand{{pkg: "bench", pattern: "Y/z", benchtime: "30x"}}},
		{"cd A/bench && K=v DATABASE_URL=… /tmp/b-A -test.bench Z\n", nil}, // an unknown binary: not a command this can check
		{"cd bench && go test -run '^$' -bench Codec -benchmem .\n", []benchCommand{{pkg: "bench", pattern: "Codec"}}},
		{"make bench\n", []benchCommand{{pkg: "bench"}}},
	}
	for _, c := range cases {
		got := parseBenchBlock("doc", c.block, map[string]string{})
		if len(got) != len(c.want) {
			t.Fatalf("%q: got %+v", c.block, got)
		}
		for i := range got {
			g, w := got[i], c.want[i]
			if g.pkg != w.pkg || g.pattern != w.pattern || g.benchtime != w.benchtime || strings.Join(g.env, ",") != strings.Join(w.env, ",") {
				t.Errorf("%q: got %+v, want %+v", c.block, g, w)
			}
		}
	}
}

func documentedBenchCommands(t *testing.T) []benchCommand {
	t.Helper()
	var out []benchCommand
	for _, f := range markdownFiles(t) {
		raw, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		binaries := map[string]string{} // a test binary built earlier in the document → its package
		for _, block := range shellBlocks(string(raw)) {
			out = append(out, parseBenchBlock(f, block, binaries)...)
		}
	}
	return out
}

// shellBlocks are a document's ```sh code blocks.
func shellBlocks(doc string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case !in && strings.HasPrefix(l, "```sh"):
			in, cur = true, nil
		case in && strings.HasPrefix(l, "```"):
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, l)
		}
	}
	return blocks
}

// parseBenchBlock reads the benchmark commands of a shell block; binaries
// carries `go test -c -o BIN PKG` across the document's blocks.
func parseBenchBlock(doc, block string, binaries map[string]string) []benchCommand {
	var out []benchCommand
	for _, line := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
		dir := "."
		for _, seg := range strings.Split(line, "&&") {
			words := shellWords(seg)
			var env []string
			envVals := map[string]string{}
			for len(words) > 0 && isAssignment(words[0]) {
				k, v, _ := strings.Cut(words[0], "=")
				env, envVals[k] = append(env, k), v
				words = words[1:]
			}
			if len(words) == 0 {
				continue
			}
			c := benchCommand{doc: doc, line: strings.TrimSpace(line), env: env}
			switch {
			case words[0] == "cd" && len(words) > 1:
				dir = words[1]
				continue
			case words[0] == "make" && len(words) > 1 && words[1] == "bench":
				for _, w := range words[2:] {
					if isAssignment(w) {
						k, v, _ := strings.Cut(w, "=")
						c.env, envVals[k] = append(c.env, k), v
					}
				}
				c.pkg, c.pattern, c.benchtime = "bench", envVals["BENCH"], envVals["BENCHTIME"]
			case words[0] == "go" && len(words) > 1 && words[1] == "test":
				flags, args := goTestFlags(words[2:])
				if len(args) == 0 {
					continue
				}
				pkg := path.Clean(path.Join(lastDirName(dir), args[len(args)-1]))
				if bin, ok := flags["o"]; ok && flags["c"] == "true" {
					binaries[bin] = pkg
					continue
				}
				if _, ok := flags["bench"]; !ok {
					continue
				}
				c.pkg, c.pattern, c.benchtime = pkg, flags["bench"], flags["benchtime"]
			default:
				pkg, ok := binaries[words[0]]
				if !ok {
					continue
				}
				flags, _ := goTestFlags(words[1:])
				p, ok := flags["test.bench"]
				if !ok {
					continue
				}
				c.pkg, c.pattern, c.benchtime = pkg, p, flags["test.benchtime"]
			}
			if c.pattern == "." {
				c.pattern = ""
			}
			out = append(out, c)
		}
	}
	return out
}

// lastDirName maps a documented `cd` to the package directory it enters
// (`cd A/bench`, A being any build's checkout, enters bench).
func lastDirName(dir string) string {
	if dir == "." {
		return "."
	}
	return path.Base(dir)
}

// boolTestFlags are go test's flags that take no value.
var boolTestFlags = map[string]bool{"c": true, "benchmem": true, "v": true, "race": true, "short": true, "test.benchmem": true, "test.v": true}

func goTestFlags(words []string) (map[string]string, []string) {
	flags := map[string]string{}
	var args []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") || w == "-" {
			args = append(args, w)
			continue
		}
		name := strings.TrimLeft(w, "-")
		if k, v, ok := strings.Cut(name, "="); ok {
			flags[k] = v
			continue
		}
		if boolTestFlags[name] || i+1 == len(words) {
			flags[name] = "true"
			continue
		}
		flags[name] = words[i+1]
		i++
	}
	return flags, args
}

var assignment = regexp.MustCompile(`^[A-Z][A-Z0-9_]*=`)

func isAssignment(w string) bool { return assignment.MatchString(w) }

// shellWords splits a command as a POSIX shell would for the shapes the
// docs use: blanks, single and double quotes, and a # comment.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			return words
		case r == ' ' || r == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

func validBenchtime(s string) bool {
	if n, ok := strings.CutSuffix(s, "x"); ok {
		v, err := strconv.Atoi(n)
		return err == nil && v > 0
	}
	d, err := time.ParseDuration(s)
	return err == nil && d > 0
}

func anyMatch(re *regexp.Regexp, names []string) bool {
	for _, n := range names {
		if re.MatchString(n) {
			return true
		}
	}
	return false
}

// benchmarksOf lists a package's Benchmark functions, and returns its test
// and non-test sources joined, for the environment variables they read.
func benchmarksOf(t *testing.T, pkg string) ([]string, string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, pkg, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var src strings.Builder
	fset := token.NewFileSet()
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(raw)
		if !strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, raw, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Benchmark") {
				names = append(names, fn.Name.Name)
			}
		}
	}
	return names, src.String()
}
