package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
)

func init() { scaleMeasures = append(scaleMeasures, measureScaleListings) }

// measureScaleListings reads the first and the last page of every listing
// of the scale store's merchant through the real server, over the read
// models the last rebuild wrote (analyzed, as a database in service is),
// with a projection runner following the log as serve runs one. It
// prints p50/p99 of each and reports the slowest p50.
func measureScaleListings(b *testing.B, s *scaleStore) {
	ctx, cancel := context.WithCancel(context.Background())
	runner := projections.NewRunner(s.Store, s.Pool, zap.NewNop(), projections.All(wiring.Sealer(s.Store))...)
	done := make(chan struct{})
	go func() { defer close(done); _ = runner.Run(ctx) }()
	defer func() { cancel(); <-done }()
	api := wiring.API(httpapi.Config{DefaultEnvironment: domain.Test, RateLimitPerMinute: 0}, s.Store, s.Pool, runner, zap.NewNop(), nil)
	defer api.Close()
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	if _, err := s.Pool.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	var sa, std string
	for _, k := range s.Keys {
		if k.Environment == domain.Test {
			switch k.Role {
			case merchant.SuperAdmin:
				sa = k.Key
			case merchant.Standard:
				std = k.Key
			}
		}
	}
	var buyer string
	if err := s.Pool.QueryRow(ctx, `SELECT buyer_id FROM rm_escrows WHERE merchant_id = $1 AND buyer_id <> '' ORDER BY pos LIMIT 1`,
		s.MerchantID).Scan(&buyer); err != nil {
		b.Fatal(err)
	}
	c := &ledgerClient{http: &http.Client{}, base: srv.URL}
	// The runner first passes what the log gained since the rebuild (the
	// cold load's stream): the first read waits for it.
	for began := time.Now(); ; time.Sleep(time.Second) {
		if _, _, err := c.do("GET", "/v1/escrow/feeds?limit=1", std, "", ""); err == nil {
			break
		} else if time.Since(began) > 10*time.Minute {
			b.Fatal(err)
		}
	}
	slowest := readListingPages(b, c, listingReads(sa, std, s.Sellers[0], buyer))
	b.ReportMetric(ledgerMS(slowest), "listing-slowest-p50-ms")
}
