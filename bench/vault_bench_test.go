package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"

	"github.com/escrowd/escrowd/domain"
)

// Vaults through HTTP (docs/performance.md, "Vaults through HTTP"): one op
// is a vault of vaultParticipants stakes created and then won.
const (
	vaultParticipants = 10
	vaultClients      = 8
	// vaultStake naira each: the pot is 1,000 (the minimum), its fee 25, the
	// merchant's commission 12.5 and the platform's share 12.5.
	vaultStake          = 100
	vaultCommissionKobo = 1250
	vaultPlatformKobo   = 1250
	vaultFunding        = 100000 // each customer's top-up
	// vaultSharedCustomers customers serve every client in the shared
	// case, so concurrent vaults keep locking the same wallets.
	vaultSharedCustomers = 2 * vaultParticipants
)

// BenchmarkVaultHTTP measures vault create + winner with 10 participants
// through the real server, at vaultClients client goroutines:
//
//   - own: each client's vaults have their own 10 customers, so vaults
//     only queue for the database, never for a wallet;
//   - shared: every vault takes 10 of the same 20 customers, so nearly
//     every pair of concurrent vaults shares wallets (each create and
//     winner appends to all 10 wallets with their expected revisions).
//     It shows what conflicts cost, and that such vaults still finish
//     (no deadlock, no livelock): any request that fails fails the run.
func BenchmarkVaultHTTP(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "own"
		if shared {
			name = "shared"
		}
		b.Run(name, func(b *testing.B) { benchVault(b, vaultClients, shared) })
	}
}

// vaultView is the part of a vault view the benchmark checks.
type vaultView struct {
	PaymentToken string `json:"paymentToken"`
	Status       string `json:"status"`
	WinnerID     string `json:"winnerId"`
	Participants []struct {
		Status string `json:"status"`
	} `json:"participants"`
}

func benchVault(b *testing.B, clients int, shared bool) {
	bs := newBenchServer(b)
	defer bs.close()
	sa, std, c := bs.sa, bs.std, bs.client
	n := vaultSharedCustomers
	if !shared {
		n = clients * vaultParticipants
	}
	custs := make([]string, n)
	for i := range custs {
		custs[i] = c.newCustomer(b, sa, fmt.Sprintf("v%d@example.com", i), fmt.Sprintf("08047%06d", i))
		if _, _, err := c.do("POST", "/v1/payment/topup", std, custs[i], fmt.Sprintf(`{"amount":%d}`, vaultFunding)); err != nil {
			b.Fatal(err)
		}
	}
	// participants of op i on client w: 10 distinct customers.
	participants := func(w int, i int64) []string {
		out := make([]string, vaultParticipants)
		for k := range out {
			if shared {
				out[k] = custs[(int(i)+k)%len(custs)]
			} else {
				out[k] = custs[w*vaultParticipants+k]
			}
		}
		return out
	}
	sumWallets := func() int64 {
		var total int64
		for _, id := range custs {
			w, err := c.walletCents(std, id)
			if err != nil {
				b.Fatal(err)
			}
			total += w
		}
		return total
	}
	funding := int64(n) * vaultFunding * 100

	creates, winners := make([][]time.Duration, clients), make([][]time.Duration, clients)
	op := func(w int, i int64) error {
		ps := participants(w, i)
		var body strings.Builder
		body.WriteString(`{"purpose":"bench","participants":[`)
		for k, id := range ps {
			if k > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"customerId":%q,"amount":%d}`, id, vaultStake)
		}
		body.WriteString(`]}`)
		env, d, err := c.do("POST", "/v1/escrow/vault/create", std, "", body.String())
		if err != nil {
			return err
		}
		var v vaultView
		if err := json.Unmarshal(env.Data, &v); err != nil || v.Status != "ONGOING" || len(v.Participants) != vaultParticipants {
			return fmt.Errorf("vault create %d (%v): %s", i, err, env.Data)
		}
		creates[w] = append(creates[w], d)
		winner := ps[int(i)%vaultParticipants]
		env, d, err = c.do("POST", "/v1/escrow/vault/winner/"+v.PaymentToken, std, "", fmt.Sprintf(`{"winnerId":%q}`, winner))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(env.Data, &v); err != nil || v.Status != "COMPLETED" || v.WinnerID != winner ||
			v.Participants[0].Status != "RELEASED" {
			return fmt.Errorf("vault winner %d (%v): %s", i, err, env.Data)
		}
		winners[w] = append(winners[w], d)
		return nil
	}
	database := bs.pool.Config().ConnConfig.Database
	cpuBefore := sampleCPU(database)
	elapsed := runClients(b, clients, op)
	cpu := cpuSince(cpuBefore, database, b.N)

	// Conservation: the customers lost exactly the fees, which the
	// merchant (commission) and the platform hold; no stake is left in
	// escrow (sumWallets counts main + escrow).
	ops := int64(b.N)
	var merchantMain, platform int64
	env, _, err := c.do("GET", "/v1/merchant/balance", sa, "", "")
	if err != nil {
		b.Fatal(err)
	}
	var mb struct {
		Main json.Number `json:"mainBalance"`
	}
	if err := json.Unmarshal(env.Data, &mb); err != nil {
		b.Fatal(err)
	}
	if merchantMain, err = benchKobo(mb.Main); err != nil {
		b.Fatal(err)
	}
	if err := bs.pool.QueryRow(context.Background(), `SELECT coalesce(sum(balance), 0)::bigint FROM rm_balances
		WHERE holder = 'platform' AND merchant_id = $1 AND environment = $2`, bs.merchantID, string(domain.Test)).Scan(&platform); err != nil {
		b.Fatal(err)
	}
	var escrowed int64
	if err := bs.pool.QueryRow(context.Background(), `SELECT coalesce(sum(balance), 0)::bigint FROM rm_balances
		WHERE holder = 'customer' AND bucket = 'escrow' AND merchant_id = $1`, bs.merchantID).Scan(&escrowed); err != nil {
		b.Fatal(err)
	}
	if held := sumWallets(); held+merchantMain+platform != funding || merchantMain != ops*vaultCommissionKobo ||
		platform != ops*vaultPlatformKobo || escrowed != 0 {
		b.Fatalf("after %d vaults: customers %d + merchant %d (want %d) + platform %d (want %d) kobo, funded %d; %d kobo left in escrow",
			ops, held, merchantMain, ops*vaultCommissionKobo, platform, ops*vaultPlatformKobo, funding, escrowed)
	}

	var cl, wl, all []time.Duration
	for w := range clients {
		cl, wl = append(cl, creates[w]...), append(wl, winners[w]...)
	}
	all = append(append(all, cl...), wl...)
	for _, s := range [][]time.Duration{cl, wl, all} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	secs := elapsed.Seconds()
	b.ReportMetric(float64(len(wl))/secs, "vaults/s")
	b.ReportMetric(float64(len(all))/secs, "req/s")
	b.ReportMetric(ledgerMS(ledgerPercentile(cl, 0.50)), "create-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(cl, 0.99)), "create-p99-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(wl, 0.50)), "winner-p50-ms")
	b.ReportMetric(ledgerMS(ledgerPercentile(wl, 0.99)), "winner-p99-ms")
	b.ReportMetric(ledgerMS(cpu.selfPerOp), "go-cpu-ms/vault")
	if cpu.pgOK {
		b.ReportMetric(ledgerMS(cpu.pgPerOp), "pg-cpu-ms/vault")
		b.ReportMetric(ledgerMS(cpu.dbPerOp), "pg-db-cpu-ms/vault")
	}
	b.ReportMetric(cpu.stealPct, "steal-%")
}
