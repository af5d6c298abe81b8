package httpapi

import (
	"bufio"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"
)

// streamFlat answers an unpaged listing: the envelope with every row
// list gives in its data array, written as the rows arrive, so a listing
// of any length costs one row of memory and nothing is cut. Until the
// first row is written a failure is an ordinary error answer; after it
// the connection is aborted, so the client sees a broken answer, never a
// complete-looking short one.
func streamFlat(c echo.Context, message string, list func(each func(row []byte) error) error) error {
	head, err := json.Marshal(message)
	if err != nil {
		return err
	}
	var w *bufio.Writer
	n := 0
	err = list(func(row []byte) error {
		if w == nil {
			w = startStream(c, head)
		}
		if n > 0 {
			if err := w.WriteByte(','); err != nil {
				return err
			}
		}
		n++
		_, err := w.Write(row)
		return err
	})
	switch {
	case err != nil && w == nil:
		return err
	case err != nil:
		panic(http.ErrAbortHandler)
	case w == nil:
		w = startStream(c, head)
	}
	if _, err := w.WriteString("]}\n"); err != nil {
		panic(http.ErrAbortHandler)
	}
	if err := w.Flush(); err != nil {
		panic(http.ErrAbortHandler)
	}
	return nil
}

// startStream writes the status line and the envelope up to the data
// array's opening bracket.
func startStream(c echo.Context, message []byte) *bufio.Writer {
	r := c.Response()
	r.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	r.WriteHeader(http.StatusOK)
	w := bufio.NewWriterSize(r, 32<<10)
	_, _ = w.WriteString(`{"status":200,"message":`)
	_, _ = w.Write(message)
	_, _ = w.WriteString(`,"data":[`)
	return w
}
