package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/inbox"
)

// Paystack's name in the inbox (as its gateway.Events adapter gives it),
// and the header carrying its events' signature.
const (
	paystackProvider        = "paystack"
	paystackSignatureHeader = "x-paystack-signature"
)

// providerHookRoutes registers the providers' event endpoints: outside
// /v1 and without an API key (the provider signs its events instead).
func (s *Server) providerHookRoutes() {
	s.e.POST("/hooks/paystack/:env", s.paystackHook, bodyLimit(s.cfg.JSONBodyLimit))
}

// ErrBadSignature refuses an event the provider did not sign.
var ErrBadSignature = domain.Errorf(domain.Unauthenticated, "Invalid signature")

// paystackHook keeps a signed Paystack event and acknowledges it; the
// inbox's worker processes it after. An unsigned or forged event is
// refused with 401 and nothing is kept.
func (s *Server) paystackHook(c echo.Context) error {
	var env domain.Environment
	switch c.Param("env") {
	case "test":
		env = domain.Test
	case "live":
		env = domain.Live
	default:
		return domain.Errorf(domain.NotFound, "Not found")
	}
	events := s.app.Gateways[env].Events
	if events == nil || events.Provider() != paystackProvider || s.inbox == nil {
		return app.ErrPaymentsNotConfigured
	}
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err // a body over the limit: 413
	}
	if !events.Authentic(body, c.Request().Header.Get(paystackSignatureHeader)) {
		return ErrBadSignature
	}
	kept := inbox.Event{Provider: paystackProvider, Environment: env, Body: body}
	if ev, err := events.Read(body); err == nil {
		kept.ID, kept.Name = ev.ID, ev.Name
	} else {
		// Signed but unreadable: kept anyway (the worker records why
		// nothing is done), identified by its bytes.
		sum := sha256.Sum256(body)
		kept.ID = "unreadable:sha256:" + hex.EncodeToString(sum[:])
	}
	fresh, err := s.inbox.Store.Put(c.Request().Context(), kept)
	if err != nil {
		return err // not kept: a 5xx makes the provider deliver it again
	}
	s.inbox.Notify()
	if !fresh {
		s.log.Info("provider event delivered again", zap.String("provider", kept.Provider),
			zap.String("environment", string(env)), zap.String("event_id", kept.ID), reqField(c))
	}
	return respond(c, http.StatusOK, "Event received", nil)
}

// ProviderEvents is the worker processing the providers' events this
// server keeps (nil when it keeps none); the process runs it.
func (s *Server) ProviderEvents() *inbox.Worker { return s.inbox }
