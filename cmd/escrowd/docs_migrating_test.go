package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestMigratingGuideOperatorCommands runs the operator commands of
// docs/migrating.md in sh, escrowd being this binary, on a merchant of
// their own: each succeeds and leaves the profile it names.
func TestMigratingGuideOperatorCommands(t *testing.T) {
	raw, err := os.ReadFile("../../docs/migrating.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(raw), "<!-- migrating-operator -->")
	section, _, ok := strings.Cut(rest, "<!-- /migrating-operator -->")
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(section)
	if !ok || m == nil {
		t.Fatal("docs/migrating.md has no operator block")
	}
	var commands []string
	for _, l := range strings.Split(strings.TrimSpace(m[1]), "\n") {
		if !strings.HasPrefix(l, "escrowd ") {
			t.Fatalf("the operator block has a line that is not an escrowd command: %q", l)
		}
		commands = append(commands, l)
	}
	if len(commands) != 3 {
		t.Fatalf("%d operator commands", len(commands))
	}
	db := pgtest.NewURL(t)
	out, err := cli(t, db, "merchant", "create", "--name", "Existing", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var existing app.CreatedMerchant
	if err := json.Unmarshal([]byte(out), &existing); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, db)
	profile := func(id string) merchant.Profile {
		t.Helper()
		st, err := service(env).Merchant(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return st.Profile()
	}
	created := regexp.MustCompile(`(?m)^merchant (\S+)$`)
	for i, c := range commands {
		cmd := exec.Command("sh", "-c", `escrowd() { "$ESCROWD_BIN" -test.run='^TestEscrowdProcess$' -- "$@"; }; `+c)
		cmd.Env = append(os.Environ(), "ESCROWD_BIN="+os.Args[0], "ESCROWD_TEST_PROCESS=1", "DATABASE_URL="+db,
			"ESCROW_DATA_DIR="+t.TempDir(), "MERCHANT="+existing.MerchantID)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s%s", c, err, stdout.String(), stderr.String())
		}
		switch i {
		case 0:
			id := created.FindStringSubmatch(stdout.String())
			if id == nil || profile(id[1]) != merchant.ProfilePayluk || !strings.Contains(stdout.String(), "compat: payluk") {
				t.Fatalf("%s printed %s", c, stdout.String())
			}
		case 1:
			if profile(existing.MerchantID) != merchant.ProfilePayluk || strings.Count(stdout.String(), "super_admin sk_") != 2 {
				t.Fatalf("%s printed %s", c, stdout.String())
			}
		case 2:
			if profile(existing.MerchantID) != merchant.ProfileNone || stdout.String() != "compat none\n" {
				t.Fatalf("%s printed %s", c, stdout.String())
			}
		}
	}
}
