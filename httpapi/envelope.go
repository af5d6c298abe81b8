package httpapi

import (
	"errors"
	"net"
	"net/http"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
)

// Envelope is every response body: status mirrors the HTTP status.
type Envelope struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
	Data    any    `json:"data"`
}

var emptyObject = struct{}{}

// respond writes a success envelope.
func respond(c echo.Context, status int, message string, data any) error {
	if data == nil {
		data = emptyObject
	}
	return c.JSON(status, Envelope{Status: status, Message: message, Data: data})
}

// statusOf is the one place where error codes become HTTP statuses.
func statusOf(code domain.Code) int {
	switch code {
	case domain.Invalid:
		return http.StatusBadRequest
	case domain.Unauthenticated:
		return http.StatusUnauthorized
	case domain.Forbidden:
		return http.StatusForbidden
	case domain.NotFound:
		return http.StatusNotFound
	case domain.Conflict:
		return http.StatusConflict
	case domain.Gone:
		return http.StatusGone
	case domain.TooLarge:
		return http.StatusRequestEntityTooLarge
	case domain.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// errorHandler renders every error as an envelope with empty data. Only
// internal errors are logged (the request logger records the rest).
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, message := http.StatusInternalServerError, "Internal server error"
	var (
		de *domain.Error
		he *echo.HTTPError
	)
	switch {
	case errors.As(err, &de):
		status, message = statusOf(de.Code), de.Message
	case databaseUnreachable(err):
		// Nothing the request did: the service cannot reach its database
		// now, and a retry may succeed.
		status, message = http.StatusServiceUnavailable, "The service is unavailable; retry shortly"
		s.log.Warn("request failed: the database is unreachable", errField(err), reqField(c))
	case errors.As(err, &he):
		status = he.Code
		switch he.Code {
		case http.StatusNotFound:
			message = "Route not found; the API reference is at /docs"
		case http.StatusMethodNotAllowed:
			message = "Method not allowed"
		case http.StatusRequestEntityTooLarge:
			message = "Request body too large"
		case http.StatusBadRequest:
			message = "Invalid request"
			if m, ok := he.Message.(string); ok && m != "" {
				message = m
			}
		default:
			message = http.StatusText(he.Code)
			if m, ok := he.Message.(string); ok && m != "" {
				message = m
			}
		}
	}
	if status >= 500 && status != http.StatusServiceUnavailable {
		s.log.Error("request failed", errField(err), reqField(c))
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, Envelope{Status: status, Message: message, Data: emptyObject})
}

// databaseUnreachable reports errors of reaching PostgreSQL (a refused or
// lost connection, a connect timeout) rather than of the request. A bare
// deadline is not one: the request's own time ran out.
func databaseUnreachable(err error) bool {
	var (
		connErr *pgconn.ConnectError
		opErr   *net.OpError // a connection refused, reset or cut
	)
	return errors.As(err, &connErr) || errors.As(err, &opErr)
}
