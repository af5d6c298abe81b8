package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/webhooks"
)

// deliveriesCeiling is the page-size ceiling of the delivery log.
const deliveriesCeiling = 100

func (s *Server) webhookRoutes() {
	sa := Policy{CID: CIDForbidden, SuperAdmin: true}
	s.handle(http.MethodGet, "/v1/merchant/webhook", sa, s.getWebhook)
	s.handle(http.MethodPut, "/v1/merchant/webhook", sa, s.putWebhook)
	s.handle(http.MethodGet, "/v1/merchant/webhook/deliveries", sa, s.listDeliveries)
	s.handle(http.MethodPost, "/v1/merchant/webhook/deliveries/:id/retry", sa, s.retryDelivery)
}

// webhookView is the callback setting of the caller's environment.
type webhookView struct {
	URL         *string            `json:"url"`
	Environment domain.Environment `json:"environment"`
}

func newWebhookView(url string, env domain.Environment) webhookView {
	v := webhookView{Environment: env}
	if url != "" {
		v.URL = &url
	}
	return v
}

func (s *Server) getWebhook(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	m, err := s.app.Merchant(c.Request().Context(), p.MerchantID)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Webhook fetched successfully", newWebhookView(m.Webhooks[p.Environment], p.Environment))
}

func (s *Server) putWebhook(c echo.Context) error {
	var body struct {
		URL json.RawMessage `json:"url"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	if len(body.URL) == 0 {
		return domain.Invalidf("url is required")
	}
	url := ""
	if string(body.URL) != "null" {
		if err := json.Unmarshal(body.URL, &url); err != nil {
			return domain.Invalidf("url must be a string")
		}
	}
	url = strings.TrimSpace(url)
	p, _ := PrincipalFrom(c)
	ctx, cancel := context.WithTimeout(c.Request().Context(), 5*time.Second)
	defer cancel()
	if err := webhooks.ValidateCallbackURL(ctx, url, p.Environment, s.cfg.WebhookAllowPrivate, nil); err != nil {
		return err
	}
	if _, err := s.app.SetWebhookURL(c.Request().Context(), actor(c), url); err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Webhook updated successfully", newWebhookView(url, p.Environment))
}

func (s *Server) outbox() (*webhooks.Outbox, error) {
	if s.hooks == nil {
		return nil, &domain.Error{Code: domain.Unavailable, Message: "Webhooks are not configured"}
	}
	return s.hooks, nil
}

func (s *Server) listDeliveries(c echo.Context) error {
	box, err := s.outbox()
	if err != nil {
		return err
	}
	f := webhooks.DeliveryFilter{Status: strings.TrimSpace(c.QueryParam("status")), Event: strings.TrimSpace(c.QueryParam("event"))}
	if f.Status != "" && !slices.Contains(webhooks.Statuses, f.Status) {
		return domain.Invalidf("status must be one of %s", strings.Join(webhooks.Statuses, ", "))
	}
	p, _ := PrincipalFrom(c)
	rows, pg, err := box.List(c.Request().Context(), p.MerchantID, p.Environment, f, pageParams(c, deliveriesCeiling))
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Webhook deliveries fetched successfully", map[string]any{"data": rows, "pagination": pg})
}

func (s *Server) retryDelivery(c echo.Context) error {
	box, err := s.outbox()
	if err != nil {
		return err
	}
	d, err := s.redeliver(c.Request().Context(), box, actor(c), c.Param("id"))
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Webhook delivery queued for retry", d)
}

// redeliver asks for another delivery of delivery id of a's merchant and
// environment through the application's command, which records a as the
// one who asked (on the escrow's timeline too when the delivery is an
// escrow's); the webhook subscriber queues it from that record. It returns
// the delivery as queued.
func (s *Server) redeliver(ctx context.Context, box *webhooks.Outbox, a app.Actor, id string) (webhooks.Delivery, error) {
	var d webhooks.Delivery
	_, err := s.app.RequestRedelivery(ctx, a, func(ctx context.Context) (app.Redeliverable, error) {
		var n int
		var err error
		d, n, err = box.Redeliverable(ctx, a.MerchantID, a.Environment, id)
		return app.Redeliverable{ID: d.ID, Event: d.Event, EscrowID: d.EscrowID, Redelivered: n}, err
	})
	return d.Queued(time.Now()), err
}
