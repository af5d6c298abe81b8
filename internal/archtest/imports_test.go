// Package archtest checks the shape of the module: which of its packages
// may import which (docs/architecture.md draws the same rules), and that
// the HTTP adapter drives the application rather than its command engine.
package archtest

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/escrowd/escrowd"

// rule says which module packages the packages matching pkg may import.
// A pattern ending in "/..." matches the package and every package under
// it; any other pattern matches one package. The first rule matching a
// package is its rule, and a package no rule matches fails the test: a new
// package is placed in the architecture deliberately.
type rule struct {
	pkg string
	// may is what the package's production files may import.
	may []string
	// testsMay is what its test files may import besides (the same
	// package's tests may reach up to build fixtures through the real
	// application, never into cmd).
	testsMay []string
}

var (
	domainPkgs = []string{"domain/..."}
	// testFixtures: tests above the stores may build their fixtures
	// through every layer (a webhook test creates its merchant through the
	// application), and the httpapi harness runs the process wiring.
	testFixtures = []string{"domain/...", "view", "eventstore/...", "migrations", "internal/...", "projections",
		"webhooks", "httpapi"}
)

// rules, from the bottom of the dependency graph up. See
// docs/architecture.md for what each package is.
var rules = []rule{
	// The domain is pure: no I/O, nothing of the module but itself. Its
	// tests are table tests of the same purity.
	{pkg: "domain/...", may: domainPkgs},
	// The API's objects, rendered from domain state.
	{pkg: "view", may: domainPkgs},
	// The event store port and its adapters.
	{pkg: "eventstore/...", may: []string{"domain/...", "eventstore/..."},
		testsMay: []string{"internal/pgtest", "migrations"}},
	// Its tests migrate fresh databases of the test cluster.
	{pkg: "migrations", testsMay: []string{"internal/pgtest"}},
	// Leaf helpers.
	{pkg: "internal/promreg"},
	{pkg: "internal/redact", may: domainPkgs, testsMay: append([]string{"internal/app"}, domainPkgs...)}, // app: the list of every event registry,
	{pkg: "internal/files", may: domainPkgs, testsMay: []string{"domain/...", "internal/pgtest", "migrations"}},
	{pkg: "internal/gateway", may: domainPkgs, testsMay: domainPkgs},
	// The Paystack adapter of the gateway ports: it translates, the
	// domain decides.
	{pkg: "internal/gateway/paystackgw", may: append([]string{"internal/gateway", "internal/paystack"}, domainPkgs...), testsMay: append([]string{"internal/paystack/paystacksim"}, domainPkgs...)},
	// The dashboard's users and sessions: credentials, no rule of money.
	// Their TOTP secrets are sealed with the merchant's data key.
	{pkg: "internal/dashauth", may: []string{"internal/keyring"}, testsMay: []string{"internal/keyring", "internal/pgtest", "migrations"}},
	// The providers' inbound events, kept before they are acknowledged.
	{pkg: "internal/inbox", may: domainPkgs, testsMay: []string{"internal/pgtest", "migrations"}},
	{pkg: "internal/pgtest", may: []string{"migrations"}},
	// Envelope encryption: data keys in PostgreSQL, wrapped by a master
	// key from a file.
	{pkg: "internal/keyring", testsMay: []string{"internal/pgtest"}},
	// The codec that seals events' personal fields, a decorator of the
	// event store port.
	{pkg: "internal/sealing", may: []string{"domain", "eventstore", "internal/keyring"}, testsMay: testFixtures},
	// A payment provider's client (no rule of money: it reports what the
	// provider answered), and the simulator of that provider that tests and
	// trials run against. Only cmd and tests import the simulator.
	{pkg: "internal/paystack"},
	{pkg: "internal/paystack/paystacksim", may: []string{"domain/...", "internal/paystack"}, testsMay: []string{"domain/...", "internal/paystack"}},
	// The rows a long fold holds (the rebuild's fills, the audit's replay).
	{pkg: "internal/hold"},
	// The contract of log consumers, below both the read models and the
	// webhook subscriber.
	{pkg: "internal/projector", may: []string{"domain/...", "eventstore"}, testsMay: testFixtures},
	// The read models: never the application or an adapter.
	{pkg: "projections", may: []string{"domain/...", "eventstore", "internal/projector", "internal/hold", "view"}, testsMay: testFixtures},
	// The application: commands and aggregate loading over the store port.
	// No read model, no adapter.
	{pkg: "internal/app", may: []string{"domain/...", "eventstore", "internal/gateway"}, testsMay: testFixtures},
	// The audit replays the log against the read models (operator tool).
	{pkg: "internal/audit", may: []string{"domain/...", "eventstore", "internal/projector", "internal/hold", "internal/app", "projections"},
		testsMay: testFixtures},
	// Adapters. Webhooks take what they need of the application and the
	// read models as narrow interfaces the wiring injects.
	{pkg: "webhooks", may: []string{"domain/...", "eventstore", "internal/projector", "internal/promreg", "view"},
		testsMay: testFixtures},
	{pkg: "httpapi", may: []string{"domain/...", "eventstore", "internal/app", "internal/dashauth", "internal/files", "internal/inbox", "internal/promreg",
		"internal/redact", "projections", "view", "webhooks"}, testsMay: append([]string{"internal/wiring"}, testFixtures...)},
	// The wiring assembles the process; only cmd and test harnesses
	// import it.
	{pkg: "internal/wiring", may: []string{"domain/...", "view", "eventstore/...", "internal/app", "internal/dashauth", "internal/files", "internal/gateway/...", "internal/inbox", "internal/projector",
		"internal/keyring", "internal/sealing", "projections", "webhooks", "httpapi"}, testsMay: testFixtures},
	// The binary, and the packages that are tests only.
	{pkg: "cmd/...", may: []string{"..."}, testsMay: []string{"..."}},
	{pkg: "internal/chaos", may: []string{"..."}, testsMay: []string{"..."}},
	{pkg: "bench", testsMay: []string{"..."}},
	{pkg: "internal/archtest"},
	{pkg: "scripts"},
}

// only lists who may import a package at all, whatever the importer's rule
// says.
var only = map[string][]string{
	"internal/wiring": {"cmd/...", "bench", "httpapi"}, // httpapi: its external test file only
	"internal/chaos":  {},
}

func matches(pattern, pkg string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchesAny(patterns []string, pkg string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(p, pkg) })
}

func ruleOf(pkg string) (rule, bool) {
	for _, r := range rules {
		if matches(r.pkg, pkg) {
			return r, true
		}
	}
	return rule{}, false
}

// pkgInfo is one package of the module as go list reports it, paths
// relative to the module.
type pkgInfo struct {
	path, dir           string
	goFiles             []string
	imports, testImport []string
}

// listPackages runs go list over the module.
func listPackages(t *testing.T) []pkgInfo {
	t.Helper()
	cmd := exec.Command("go", "list", "-f",
		`{{.ImportPath}}|{{.Dir}}|{{join .GoFiles ","}}|{{join .Imports ","}}|{{join .TestImports ","}},{{join .XTestImports ","}}`,
		module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkgInfo
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "|")
		if len(f) != 5 {
			t.Fatalf("go list line %q", sc.Text())
		}
		pkgs = append(pkgs, pkgInfo{path: rel(f[0]), dir: f[1], goFiles: split(f[2]),
			imports: moduleOnly(split(f[3])), testImport: moduleOnly(split(f[4]))})
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages: %s", len(pkgs), out)
	}
	return pkgs
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

func moduleOnly(imports []string) []string {
	var out []string
	for _, imp := range imports {
		if imp == module || strings.HasPrefix(imp, module+"/") {
			out = append(out, rel(imp))
		}
	}
	return out
}

// check returns the forbidden edges of pkgs, one line each.
func check(pkgs []pkgInfo) []string {
	var bad []string
	for _, p := range pkgs {
		r, ok := ruleOf(p.path)
		if !ok {
			bad = append(bad, p.path+": no rule places this package (add one to rules)")
			continue
		}
		edge := func(imp string, allowed []string, kind string) {
			if imp == p.path {
				return // an external test of the package itself
			}
			if who, ok := only[imp]; ok && !matchesAny(who, p.path) {
				bad = append(bad, p.path+" -> "+imp+" ("+kind+"): only "+strings.Join(who, ", ")+" may import "+imp)
				return
			}
			if !matchesAny(allowed, imp) {
				bad = append(bad, p.path+" -> "+imp+" ("+kind+"): not allowed by the rule for "+r.pkg)
			}
		}
		for _, imp := range p.imports {
			edge(imp, r.may, "production")
		}
		for _, imp := range p.testImport {
			edge(imp, append(slices.Clone(r.may), r.testsMay...), "test")
		}
	}
	return bad
}

// TestImportDirection: every import between the module's packages is one
// the rules allow.
func TestImportDirection(t *testing.T) {
	for _, bad := range check(listPackages(t)) {
		t.Error(bad)
	}
}

// TestRulesCatchWrongEdges: the check refuses the edges the architecture
// forbids (so that a rule loosened by mistake shows here).
func TestRulesCatchWrongEdges(t *testing.T) {
	for _, c := range []struct{ from, to string }{
		{"domain/escrow", "eventstore"},
		{"domain/escrow", "view"},
		{"eventstore/postgres", "projections"},
		{"projections", "internal/app"},
		{"projections", "webhooks"},
		{"internal/app", "projections"},
		{"internal/app", "httpapi"},
		{"webhooks", "internal/app"},
		{"webhooks", "projections"},
		{"webhooks", "httpapi"},
		{"httpapi", "internal/wiring"},
		{"projections", "internal/wiring"},
	} {
		if bad := check([]pkgInfo{{path: c.from, imports: []string{c.to}}}); len(bad) == 0 {
			t.Errorf("%s -> %s passes the check", c.from, c.to)
		}
	}
	if bad := check([]pkgInfo{{path: "newpkg"}}); len(bad) == 0 {
		t.Error("a package no rule places passes the check")
	}
}

// engineNames are what of internal/app only the application itself and
// the wiring use: the command engine and aggregate loading.
var engineNames = map[string]bool{"Engine": true, "NewEngine": true, "NewService": true, "Load": true, "Peek": true}

// TestHTTPAPICallsTheApplication: httpapi's production files call the
// application's methods, never its engine (app.Load, app.Engine, a
// Service's Engine field): how an aggregate is loaded is the
// application's business.
func TestHTTPAPICallsTheApplication(t *testing.T) {
	var httpapi *pkgInfo
	pkgs := listPackages(t)
	for i := range pkgs {
		if pkgs[i].path == "httpapi" {
			httpapi = &pkgs[i]
		}
	}
	if httpapi == nil {
		t.Fatal("no httpapi package")
	}
	fset := token.NewFileSet()
	for _, name := range httpapi.goFiles {
		f, err := parser.ParseFile(fset, filepath.Join(httpapi.dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "app" && engineNames[sel.Sel.Name] {
				t.Errorf("%s: app.%s: call the application (app.Service) instead", fset.Position(sel.Pos()), sel.Sel.Name)
			} else if sel.Sel.Name == "Engine" {
				t.Errorf("%s: .Engine: call the application (app.Service) instead", fset.Position(sel.Pos()))
			}
			return true
		})
	}
}
