package httpapi

import (
	"bytes"
	"encoding/json"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// notYetRegistered are routes the document describes that this build
// does not serve yet (none now). Whoever registers one removes it here (the
// test below fails until then); once they are all in, this list is empty.
var notYetRegistered = []string{}

var paramSegment = regexp.MustCompile(`\{[^/]+\}`)

// documentedRoutes are the document's operations as "METHOD /path/{p}".
func documentedRoutes(t *testing.T) map[string]bool {
	t.Helper()
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	out := map[string]bool{}
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options":
				out[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	return out
}

// The document is OpenAPI 3.1, and every operation names its tag, its
// success response and the error envelope as its default response.
func TestOpenAPIDocumentShape(t *testing.T) {
	var doc struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]map[string]struct {
			Tags      []string                   `json:"tags"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	for path, item := range doc.Paths {
		for method, op := range item {
			if len(op.Tags) == 0 || len(op.Responses) != 2 || !strings.Contains(string(op.Responses["default"]), "#/components/responses/Error") {
				t.Errorf("%s %s: tags %v, responses %v", method, path, op.Tags, op.Responses)
			}
		}
	}
}

// Every /v1 route the server registers is documented, and every
// documented route is registered, except those listed as not yet
// registered (and none of those is registered).
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	h := newHarness(t)
	echoParam := regexp.MustCompile(`:([^/]+)`)
	registered := map[string]bool{}
	for _, r := range h.api.Echo().Routes() {
		if strings.HasPrefix(r.Path, "/v1/") {
			registered[r.Method+" "+echoParam.ReplaceAllString(r.Path, "{$1}")] = true
		}
	}
	docRoutes := documentedRoutes(t)
	var undocumented, missing, early []string
	for r := range registered {
		if _, ok := docRoutes[normalizeParams(r, docRoutes)]; !ok {
			undocumented = append(undocumented, r)
		}
	}
	for r := range docRoutes {
		if !registeredUnderAnyName(r, registered) && !slices.Contains(notYetRegistered, r) {
			missing = append(missing, r)
		}
	}
	for _, r := range notYetRegistered {
		if _, ok := docRoutes[r]; !ok {
			t.Errorf("notYetRegistered lists %s, which openapi.json does not document", r)
		}
		if registeredUnderAnyName(r, registered) {
			early = append(early, r)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(missing)
	if len(undocumented) > 0 {
		t.Errorf("registered but not in openapi.json:\n  %s", strings.Join(undocumented, "\n  "))
	}
	if len(missing) > 0 {
		t.Errorf("in openapi.json but not registered:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(early) > 0 {
		t.Errorf("registered now: remove from notYetRegistered in openapi_test.go:\n  %s", strings.Join(early, "\n  "))
	}
}

// shape is a route with its parameter names blanked: the document may name
// a path parameter otherwise than the router does.
func shape(route string) string { return paramSegment.ReplaceAllString(route, "{}") }

func normalizeParams(route string, docRoutes map[string]bool) string {
	for r := range docRoutes {
		if shape(r) == shape(route) {
			return r
		}
	}
	return route
}

func registeredUnderAnyName(route string, registered map[string]bool) bool {
	for r := range registered {
		if shape(r) == shape(route) {
			return true
		}
	}
	return false
}

// The document and its reference page are served without a key; the page
// loads its renderer from this server, not from a CDN.
func TestOpenAPIAndDocsAreServed(t *testing.T) {
	h := newHarness(t)
	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		res, err := http.Get(h.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}
	res, body := get("/openapi.json")
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || !bytes.Equal(body, OpenAPIDocument) {
		t.Fatalf("/openapi.json: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	res, body = get("/docs")
	page := string(body)
	if res.StatusCode != 200 || !strings.Contains(page, `spec-url="/openapi.json"`) || !strings.Contains(page, `src="/docs/redoc.standalone.js"`) ||
		strings.Contains(page, "https://") {
		t.Fatalf("/docs: %d\n%s", res.StatusCode, page)
	}
	res, body = get("/docs/redoc.standalone.js")
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") || !bytes.Equal(body, redocBundle) || len(body) < 100000 {
		t.Fatalf("/docs/redoc.standalone.js: %d %s, %d bytes", res.StatusCode, res.Header.Get("Content-Type"), len(body))
	}
}

// TestDocsRenderInChromium: /docs, rendered by the Redoc bundled in the
// binary, in a real headless Chromium (scripts/chromium.sh installs it),
// shows every route group of the document on the page, and its screenshot
// (kept under .data/screenshots) is a drawn page, not a blank one.
func TestDocsRenderInChromium(t *testing.T) {
	tab := browser(t)
	h := newHarness(t)
	var doc struct {
		Tags []struct {
			Name string `json:"name"`
		} `json:"tags"`
	}
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Tags) < 10 {
		t.Fatalf("only %d route groups in the document", len(doc.Tags))
	}
	var names []string
	for _, tag := range doc.Tags {
		names = append(names, tag.Name)
	}
	if status := navigate(t, tab, h.srv.URL+"/docs"); status != http.StatusOK {
		t.Fatalf("GET /docs: %d", status)
	}
	list, _ := json.Marshal(names)
	// The groups not drawn: no element showing the name alone has a box
	// on the page (Redoc draws after its script has run).
	missingJS := `((names) => names.filter(n => ![...document.querySelectorAll("body *")].some(el =>
		el.children.length === 0 && el.textContent.trim() === n && el.getClientRects().length > 0 &&
		getComputedStyle(el).visibility === "visible")))(` + string(list) + `)`
	var missing []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		var err error
		if missing, err = chromedp.Run(tab, chromedp.Evaluate[[]string](missingJS)); err != nil {
			t.Fatal(err)
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		body, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.body.innerText`))
		t.Errorf("route groups not shown on /docs: %v\n%.3000s", missing, body)
	}
	shot, err := png.Decode(bytes.NewReader(screenshot(t, tab, "docs")))
	if err != nil {
		t.Fatal(err)
	}
	colors := map[color.RGBA]bool{}
	b := shot.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			colors[color.RGBAModel.Convert(shot.At(x, y)).(color.RGBA)] = true
		}
	}
	if b.Dx() < 1000 || b.Dy() < 900 || len(colors) < 20 {
		t.Errorf("the screenshot of /docs is %dx%d with %d colours: not a drawn reference", b.Dx(), b.Dy(), len(colors))
	}
}
