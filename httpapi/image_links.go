package httpapi

import (
	"encoding/json"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
)

// Images by URL: a JSON escrow create or edit may name its images under
// imageUrl as one https URL or an array of them, as integrations written
// for the public escrow API send them (they host their images
// themselves). The URLs are stored and shown as given and never fetched
// by the service: the buyer's browser loads them (the checkout page's CSP
// allows https images; it sends no Referer). Multipart requests send
// image files under the same name instead.
const (
	// maxLinkedImages bounds the URLs of one request, as files are
	// bounded at creation.
	maxLinkedImages = 5
	// maxImageURLLen is the cap on every URL field.
	maxImageURLLen = 2048
)

const (
	msgImageURLShape = "imageUrl must be an https URL or an array of at most 5 https URLs"
	msgImageURLOwn   = "imageUrl must not name a file stored by this service; send the image itself instead"
)

// linkedImages reads the imageUrl URLs of a JSON request's fields f (none
// for a multipart request, whose images are files).
func (s *Server) linkedImages(c echo.Context, f map[string]json.RawMessage) ([]string, error) {
	if isMultipart(c.Request()) {
		return nil, nil
	}
	raw, ok := f[imageField]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var urls []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		urls = []string{one}
	} else if json.Unmarshal(raw, &urls) != nil || len(urls) > maxLinkedImages {
		return nil, domain.Invalidf(msgImageURLShape)
	}
	own := strings.TrimRight(s.cfg.PublicURL, "/") + "/files/"
	for _, u := range urls {
		if !validImageURL(u) {
			return nil, domain.Invalidf(msgImageURLShape)
		}
		if strings.HasPrefix(u, own) {
			// Stored files belong to the escrow that uploaded them (they are
			// removed with it); a link to one would outlive it or keep it.
			return nil, domain.Invalidf(msgImageURLOwn)
		}
	}
	return urls, nil
}

// validImageURL: an absolute https URL with a host and no credentials, at
// most maxImageURLLen bytes of printable ASCII (as a URL is sent; a client
// percent-encodes anything else).
func validImageURL(s string) bool {
	if s == "" || len(s) > maxImageURLLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https" && u.Hostname() != "" && u.User == nil && u.Opaque == ""
}
