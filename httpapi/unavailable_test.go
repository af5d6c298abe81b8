package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"
)

// TestUnreachableDatabaseIs503: an error of reaching PostgreSQL (here a
// real connection refused by a closed loopback port) answers 503 with a
// retryable message, not 500; any other error stays 500.
func TestUnreachableDatabaseIs503(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, connErr := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if connErr == nil {
		t.Fatal("connected to a closed port")
	}
	s := &Server{log: zap.NewNop()}
	for _, tc := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("load customer: %w", connErr), http.StatusServiceUnavailable},
		{errors.New("a bug"), http.StatusInternalServerError},
	} {
		rec := httptest.NewRecorder()
		s.errorHandler(tc.err, echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/v1/customers", nil), rec))
		var env Envelope
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || rec.Code != tc.status || env.Status != tc.status {
			t.Errorf("%v: %d %s, want %d", tc.err, rec.Code, rec.Body, tc.status)
		}
	}
}

// TestRootPointsToTheReference: a request to / (or any route that does not
// exist) answers a JSON 404 that says where the API reference is.
func TestRootPointsToTheReference(t *testing.T) {
	h := newHarness(t)
	h.do(req{path: "/"}).expect(t, 404, "Route not found; the API reference is at /docs")
}
