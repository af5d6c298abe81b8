package httpapi

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// OpenAPIDocument is the API's description (OpenAPI 3.1): every /v1 route
// with its parameters, request bodies, responses and the error envelope.
// It is written by hand, once, here; tests keep it true: every route
// registered is in it, every route in it is registered, and every answer
// of the end-to-end tests validates against its operation's response
// schema (kin-openapi, JSON Schema 2020-12; openapi_validate_test.go).
//
//go:embed openapi.json
var OpenAPIDocument []byte

// The reference page's renderer: Redoc's standalone bundle (npm package
// redoc 3.0.1, MIT, docs/redoc.LICENSE), served from the binary, so the
// page needs no CDN.
//
//go:embed docs/redoc.standalone.js
var redocBundle []byte

const docsPage = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>escrowd API reference</title>
</head>
<body>
<redoc spec-url="/openapi.json"></redoc>
<noscript>The reference needs JavaScript; the document itself is at <a href="/openapi.json">/openapi.json</a>.</noscript>
<script type="module" src="/docs/redoc.standalone.js"></script>
</body>
</html>
`

// docRoutes serves the API's description and its reference page, without
// a key.
func (s *Server) docRoutes() {
	s.e.GET("/openapi.json", func(c echo.Context) error {
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, OpenAPIDocument)
	})
	s.e.GET("/docs", func(c echo.Context) error { return c.HTML(http.StatusOK, docsPage) })
	s.e.GET("/docs/redoc.standalone.js", func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "public, max-age=86400")
		return c.Blob(http.StatusOK, "text/javascript; charset=utf-8", redocBundle)
	})
}
