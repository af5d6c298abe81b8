package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/view"
)

// decodeJSON reads a JSON object body into dst. An empty body is an empty
// object; anything else malformed is 400 Invalid JSON body. The body is
// held in memory once (readBody) and decoded where it lies: the route's
// limit (bodyLimit) bounds it before it is read, so a body of any declared
// size costs at most that limit.
func decodeJSON(c echo.Context, dst any) error {
	body, err := readBody(c.Request())
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &domain.Error{Code: domain.TooLarge, Message: "Request body too large"}
		}
		return domain.Invalidf("Invalid JSON body")
	}
	if err := checkJSONText(body); err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return domain.Invalidf("%s has the wrong type", te.Field)
		}
		return domain.Invalidf("Invalid JSON body")
	}
	return nil
}

// readBody returns the request body, read once: the idempotency spool's
// bytes when it holds them, else one buffer sized from the declared length
// (a body without one grows its buffer up to the route's limit).
func readBody(r *http.Request) ([]byte, error) {
	if rb, ok := r.Body.(replayBody); ok && rb.mem != nil {
		return rb.mem, nil
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(r.Body)
	return buf.Bytes(), err
}

// maxPage caps a requested page number: a page past every row is empty
// however far past, and (page-1)*limit must stay a valid OFFSET (a page of
// 9223372036854775807 overflowed it to a negative number, a 500).
const maxPage = 1_000_000

// pageParams applies the paging rules: default 10, ceiling capped, a
// non-positive or non-numeric value falls back to the default.
// startingAfter (a row's id, as a previous page's nextCursor gave it)
// asks for the rows after that row instead of a page number.
func pageParams(c echo.Context, ceiling int) view.Page {
	p := view.Page{Page: 1, Limit: 10, After: strings.TrimSpace(c.QueryParam("startingAfter"))}
	switch v, err := strconv.Atoi(c.QueryParam("page")); {
	case err == nil && v > 0:
		p.Page = min(v, maxPage)
	case errors.Is(err, strconv.ErrRange) && v > 0:
		p.Page = maxPage
	}
	if v, err := strconv.Atoi(c.QueryParam("limit")); err == nil && v > 0 {
		p.Limit = min(v, ceiling)
	}
	return p
}

// actor is the command actor of the request.
func actor(c echo.Context) app.Actor {
	p, _ := PrincipalFrom(c)
	return app.Actor{MerchantID: p.MerchantID, Environment: p.Environment, KeyID: p.KeyID,
		RequestID: c.Request().Header.Get("X-Request-Id")}
}
