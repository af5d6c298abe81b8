package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/view"
)

// decodeJSON reads a JSON object body into dst. An empty body is an empty
// object; anything else malformed is 400 Invalid JSON body.
func decodeJSON(c echo.Context, dst any) error {
	body, err := io.ReadAll(c.Request().Body)
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
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return domain.Invalidf("%s has the wrong type", te.Field)
		}
		return domain.Invalidf("Invalid JSON body")
	}
	if dec.More() {
		return domain.Invalidf("Invalid JSON body")
	}
	return nil
}

// maxPage caps a requested page number: a page past every row is empty
// however far past, and (page-1)*limit must stay a valid OFFSET (a page of
// 9223372036854775807 overflowed it to a negative number, a 500).
const maxPage = 1_000_000

// pageParams applies the paging rules: default 10, ceiling capped, a
// non-positive or non-numeric value falls back to the default.
func pageParams(c echo.Context, ceiling int) view.Page {
	p := view.Page{Page: 1, Limit: 10}
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
