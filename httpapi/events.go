package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/redact"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/view"
)

// The audit trail's page sizes.
const (
	eventsDefaultLimit = 100
	eventsCeiling      = 500
)

// eventRoutes: the audit trail, read from the event store itself.
func (s *Server) eventRoutes() {
	s.handle(http.MethodGet, "/v1/events", Policy{CID: CIDForbidden, SuperAdmin: true}, s.listEvents)
}

// auditEvent is one event of the audit trail. position is the event's
// place in the log as "commit/prepare", the value after takes.
type auditEvent struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Position  string          `json:"position"`
	StreamID  string          `json:"streamId"`
	CreatedAt time.Time       `json:"createdAt"`
	Data      json.RawMessage `json:"data"`
}

// listEvents is GET /v1/events: the key's merchant and environment's
// events in commit order, from the event store (not a copy that can
// drift), credentials redacted. With after it answers {data, nextAfter,
// hasMore} for incremental sync; otherwise {data, pagination}.
func (s *Server) listEvents(c echo.Context) error {
	if s.eventLog == nil {
		return &domain.Error{Code: domain.Unavailable, Message: "The audit trail is not available on this server"}
	}
	p, _ := PrincipalFrom(c)
	f := eventstore.TenantFilter{MerchantID: p.MerchantID, Environment: string(p.Environment),
		Type: strings.TrimSpace(c.QueryParam("type"))}
	from, to, err := dateRange(c)
	if err != nil {
		return err
	}
	if from != nil {
		f.From = *from
	}
	if to != nil {
		f.To = *to
	}
	limit := eventsDefaultLimit
	if v, err := strconv.Atoi(c.QueryParam("limit")); err == nil && v > 0 {
		limit = min(v, eventsCeiling)
	}
	// The fence a read of the read models takes: once they include every
	// write acknowledged before this request, so does the log below its
	// horizon, which is what ReadTenant returns.
	q, err := s.readModels(c, projections.AuditTrailName)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if raw, incremental := c.QueryParams()["after"]; incremental {
		after, err := eventstore.ParsePosition(strings.TrimSpace(raw[0]))
		if err != nil {
			return domain.Invalidf("after must be a position (commit/prepare) from this API, or 0")
		}
		events, err := eventstore.ReadTenant(ctx, s.eventLog, f, after, 0, limit+1)
		if err != nil {
			return err
		}
		more := len(events) > limit
		events = events[:min(len(events), limit)]
		next := after
		if len(events) > 0 {
			next = events[len(events)-1].Position
		}
		out, err := auditEvents(events)
		if err != nil {
			return err
		}
		return respond(c, http.StatusOK, "Events fetched successfully", map[string]any{
			"data": out, "nextAfter": next.String(), "hasMore": more})
	}
	page := view.Page{Page: 1, Limit: limit}
	if v, err := strconv.Atoi(c.QueryParam("page")); err == nil && v > 0 {
		page.Page = min(v, maxPage)
	}
	var (
		k      = int64(page.Page-1) * int64(page.Limit) // events before the page
		count  int64
		seek   projections.AuditSeek
		cursor = strings.TrimSpace(c.QueryParam("startingAfter"))
	)
	if f.From.IsZero() && f.To.IsZero() {
		// The count the audit trail projector keeps, and a mark at most
		// 1,023 matching events before the page (docs/listings.md).
		if count, seek, err = q.AuditPage(ctx, p.MerchantID, p.Environment, f.Type, k); err != nil {
			return err
		}
	} else {
		// A time range is not kept: count it in the store and skip to the page.
		if count, err = eventstore.CountTenant(ctx, s.eventLog, f); err != nil {
			return err
		}
		seek.Skip = int(k)
	}
	if cursor != "" {
		if seek.After, err = eventstore.ParsePosition(cursor); err != nil {
			return domain.Invalidf("startingAfter must be a position (commit/prepare) from this API")
		}
		seek.Skip = 0
	}
	var events []eventstore.RecordedEvent
	if k < count || cursor != "" {
		if events, err = eventstore.ReadTenant(ctx, s.eventLog, f, seek.After, seek.Skip, page.Limit+1); err != nil {
			return err
		}
	}
	more := len(events) > page.Limit
	events = events[:min(len(events), page.Limit)]
	out, err := auditEvents(events)
	if err != nil {
		return err
	}
	var next *string
	if more {
		n := events[len(events)-1].Position.String()
		next = &n
	}
	page.After = cursor
	pg := view.PageOf(page, count, next)
	return respond(c, http.StatusOK, "Events fetched successfully", map[string]any{"data": out, "pagination": pg})
}

// auditEvents shows stored events as the audit trail does: data with
// secrets and key digests redacted, BVNs masked; metadata is not shown.
func auditEvents(events []eventstore.RecordedEvent) ([]auditEvent, error) {
	out := make([]auditEvent, 0, len(events))
	for _, e := range events {
		data, err := redact.Data(e.Type, e.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, auditEvent{ID: e.ID.String(), Type: e.Type, Position: e.Position.String(), StreamID: e.Stream,
			CreatedAt: e.RecordedAt.UTC(), Data: data})
	}
	return out, nil
}
