package httpapi

import (
	"context"
	"errors"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/files"
)

// imageField is the multipart field escrow images arrive under.
const imageField = "imageUrl"

// multipartMemory is how much of a multipart body is held in memory; the
// rest of the files spill to temporary files (removed by net/http after the
// request).
const multipartMemory = 8 << 20

const ctxMultipartErr = "httpapi.multipartErr"

// fileRoutes serves uploaded files back without a key: the unguessable name
// is the capability. Only the global middleware (recover, request log,
// metrics) applies.
func (s *Server) fileRoutes() {
	s.e.GET("/files/:name", s.serveFile)
	s.e.HEAD("/files/:name", s.serveFile)
	s.e.GET("/files/:owner/:name", s.serveFile)
	s.e.HEAD("/files/:owner/:name", s.serveFile)
}

func (s *Server) serveFile(c echo.Context) error {
	name := c.Param("name")
	if owner := c.Param("owner"); owner != "" {
		name = owner + "/" + name
	}
	f, contentType, modTime, err := s.files.Open(c.Request().Context(), name)
	if err != nil {
		return err
	}
	defer f.Close()
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	// A file is a client's upload shown on the service's origin: it may run
	// nothing there (sandbox), only an image is shown in the browser, and
	// no shared cache keeps a file that its escrow's deletion removes.
	h.Set("Content-Security-Policy", "sandbox")
	if !strings.HasPrefix(contentType, "image/") {
		h.Set("Content-Disposition", "attachment")
	}
	h.Set("Cache-Control", "private, max-age=86400")
	h.Set("ETag", `"`+c.Param("name")+`"`)
	http.ServeContent(c.Response(), c.Request(), "", modTime, f)
	return nil
}

// saveImages stores the imageUrl files of a multipart request (at most max)
// and returns their public URLs; a JSON request has none (nil). If the
// command then fails, the caller removes them with s.removeFiles(c, urls).
func (s *Server) saveImages(c echo.Context, max int) ([]string, error) {
	form, err := multipartForm(c)
	if err != nil || form == nil {
		return nil, err
	}
	headers, err := files.ImagesFrom(form, imageField, max)
	if err != nil || len(headers) == 0 {
		return nil, err
	}
	return s.files.SaveImages(c.Request().Context(), fileOwner(c), headers)
}

// fileOwner is the files folder of the request's merchant environment,
// which its storage quota counts.
func fileOwner(c echo.Context) string {
	p, _ := PrincipalFrom(c)
	return files.Owner(p.MerchantID, string(p.Environment))
}

// evidenceField is the multipart field dispute evidence arrives under.
const evidenceField = "file"

// saveEvidence stores the one evidence file of a multipart request and
// returns its public URL ("" when none was sent). If the command then
// fails, the caller removes it with s.removeFiles.
func (s *Server) saveEvidence(c echo.Context) (string, error) {
	form, err := multipartForm(c)
	if err != nil || form == nil {
		return "", err
	}
	headers := form.File[evidenceField]
	switch len(headers) {
	case 0:
		return "", nil
	case 1:
		return s.files.SaveEvidence(c.Request().Context(), fileOwner(c), headers[0])
	}
	return "", domain.Invalidf("file accepts one file")
}

// formValues returns the non-file fields of a multipart/form-data request
// (first value of each) and true; false for any other request, which the
// handler decodes as JSON. A body that fails to parse gives an empty map:
// call multipartForm first to report that error.
func formValues(c echo.Context) (map[string]string, bool) {
	if !isMultipart(c.Request()) {
		return nil, false
	}
	out := map[string]string{}
	form, err := multipartForm(c)
	if err != nil || form == nil {
		return out, true
	}
	for k, vs := range form.Value {
		if len(vs) > 0 {
			out[k] = vs[0]
		}
	}
	return out, true
}

// multipartForm parses a multipart/form-data body once (within the route's
// body limit) and returns it; nil without error for other requests. Over
// the limit is 413, a malformed body 400.
func multipartForm(c echo.Context) (*multipart.Form, error) {
	r := c.Request()
	if !isMultipart(r) {
		return nil, nil
	}
	if err, ok := c.Get(ctxMultipartErr).(error); ok {
		return nil, err
	}
	if r.MultipartForm != nil {
		return r.MultipartForm, nil
	}
	if err := r.ParseMultipartForm(multipartMemory); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = &domain.Error{Code: domain.TooLarge, Message: "Request body too large"}
		} else {
			err = domain.Invalidf("Invalid multipart body")
		}
		c.Set(ctxMultipartErr, err)
		return nil, err
	}
	if err := checkFormText(r.MultipartForm.Value); err != nil {
		c.Set(ctxMultipartErr, err)
		return nil, err
	}
	return r.MultipartForm, nil
}

func isMultipart(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
	return err == nil && mt == echo.MIMEMultipartForm
}

// removeFiles removes stored files a command did not keep (or a deleted
// escrow's). A failure is logged, not answered: the command's outcome
// stands, and orphan collection removes what is left.
func (s *Server) removeFiles(c echo.Context, urls []string) {
	if len(urls) == 0 {
		return
	}
	if err := s.files.Remove(context.WithoutCancel(c.Request().Context()), urls); err != nil {
		s.log.Warn("files: cannot remove; orphan collection will", zap.Error(err))
	}
}
