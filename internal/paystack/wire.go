package paystack

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Paystack's answers are loose in places: a field is sometimes a string
// and sometimes a number or an object, a date sometimes null or empty.
// These types read each form into one Go value.

// flexString reads a JSON string, number or null as a string.
type flexString string

func (s *flexString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		*s = ""
		return nil
	}
	if b[0] == '"' {
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = flexString(v)
		return nil
	}
	if b[0] == '{' || b[0] == '[' {
		*s = ""
		return nil
	}
	*s = flexString(string(b))
	return nil
}

// flexInt reads a JSON integer, a string holding one, or null.
type flexInt int64

func (n *flexInt) UnmarshalJSON(b []byte) error {
	var s flexString
	if err := s.UnmarshalJSON(b); err != nil {
		return err
	}
	if s == "" {
		*n = 0
		return nil
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		// A decimal amount would be a misread of kobo: refuse it.
		return err
	}
	*n = flexInt(v)
	return nil
}

// flexTime reads an RFC 3339 time, or null / "" as the zero time.
type flexTime time.Time

func (t *flexTime) UnmarshalJSON(b []byte) error {
	var s flexString
	if err := s.UnmarshalJSON(b); err != nil {
		return err
	}
	if s == "" {
		*t = flexTime{}
		return nil
	}
	v, err := time.Parse(time.RFC3339Nano, string(s))
	if err != nil {
		return err
	}
	*t = flexTime(v)
	return nil
}

func (t flexTime) time() time.Time { return time.Time(t) }

// either returns a, or b when a is zero (Paystack writes createdAt in one
// answer and created_at in another).
func either(a, b flexTime) time.Time {
	if !time.Time(a).IsZero() {
		return time.Time(a)
	}
	return time.Time(b)
}

// listMeta is the meta of a page-numbered listing.
type listMeta struct {
	Total     flexInt    `json:"total"`
	Skipped   flexInt    `json:"skipped"`
	PerPage   flexInt    `json:"perPage"`
	Page      flexInt    `json:"page"`
	PageCount flexInt    `json:"pageCount"`
	Next      flexString `json:"next"`
}
