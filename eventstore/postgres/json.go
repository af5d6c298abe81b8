// Event payloads as PostgreSQL's jsonb stores them.

package postgres

import (
	"bytes"
	"encoding/json"
	"errors"
)

func jsonOrNull(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// storableEscapes refuses the two things that are valid JSON, that the
// json column type accepts, and that jsonb, which the store used before
// (migration 0007), refused: the escape \u0000 (no PostgreSQL text can hold
// the character, so an event carrying it would be stored and then stop
// every projection that writes the string to a text column) and UTF-16
// surrogate escapes that are not a high one followed directly by a low
// one. Everything else, invalid JSON included, is left to PostgreSQL,
// which refuses what is not valid JSON. Data without a backslash, almost
// all of it, costs one IndexByte.
func storableEscapes(b []byte) error {
	for i := 0; ; {
		k := bytes.IndexByte(b[i:], '\\')
		if k < 0 {
			return nil
		}
		i += k
		if i+1 >= len(b) {
			return nil // not valid JSON: PostgreSQL refuses it
		}
		if b[i+1] != 'u' {
			i += 2 // \", \\, \/, \b ...: the escaped byte is never a backslash that starts an escape
			continue
		}
		cp, ok := hex4(b[i+2:])
		if !ok {
			return nil // not valid JSON: PostgreSQL refuses it
		}
		switch {
		case cp == 0:
			return errNULEscape
		case cp >= 0xD800 && cp <= 0xDBFF:
			if len(b) >= i+12 && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4(b[i+8:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 12
					continue
				}
			}
			return errSurrogateEscape
		case cp >= 0xDC00 && cp <= 0xDFFF:
			return errSurrogateEscape
		}
		i += 6
	}
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

var (
	errNULEscape       = errors.New("unsupported Unicode escape sequence: \\u0000 cannot be stored as text")
	errSurrogateEscape = errors.New("invalid JSON: a Unicode surrogate escape that is not a high one followed by a low one")
)
