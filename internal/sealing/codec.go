// Package sealing keeps secrets and personal data out of the plain event
// log: an eventstore.Store decorator that, on append, replaces the fields
// each event type declares personal or secret (fields.go) by values sealed
// with their subject's data key (internal/keyring) and, on read, opens
// them again. A field whose subject's key was destroyed reads Erased.
// Everything else of an event (amounts, references, times) stays plain
// JSON, for auditors.
package sealing

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/keyring"
)

// Prefix starts every sealed value: "escrowd-sealed:v1:<subject>:<base64>".
const Prefix = domain.SealedPrefix

// Erased is what a sealed field reads once its subject's key is destroyed.
const Erased = domain.Erased

var quotedPrefix = []byte(`"` + Prefix)

// Keys is what the codec needs of the keyring.
type Keys interface {
	Seal(ctx context.Context, s keyring.Subject, plaintext, aad []byte) ([]byte, error)
	Open(ctx context.Context, s keyring.Subject, sealed, aad []byte) ([]byte, error)
	BlindIndex(ctx context.Context, purpose, value string) (string, error)
}

// Sealed reports whether data holds a sealed value.
func Sealed(data []byte) bool { return bytes.Contains(data, quotedPrefix) }

// aad binds a sealed value to its event type (or snapshot) and field.
func aad(typ, path string) []byte { return []byte(typ + "\x00" + path) }

func sealValue(ctx context.Context, keys Keys, s keyring.Subject, typ, path, plain string) (string, error) {
	ct, err := keys.Seal(ctx, s, []byte(plain), aad(typ, path))
	if err != nil {
		return "", err
	}
	return Prefix + string(s) + ":" + base64.RawStdEncoding.EncodeToString(ct), nil
}

// openValue opens a sealed value; Erased when its subject's key is gone.
func openValue(ctx context.Context, keys Keys, typ, path, sealed string) (string, error) {
	rest := strings.TrimPrefix(sealed, Prefix)
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return "", fmt.Errorf("sealing: malformed sealed value in %s %s", typ, path)
	}
	ct, err := base64.RawStdEncoding.DecodeString(rest[i+1:])
	if err != nil {
		return "", fmt.Errorf("sealing: malformed sealed value in %s %s: %w", typ, path, err)
	}
	plain, err := keys.Open(ctx, keyring.Subject(rest[:i]), ct, aad(typ, path))
	if errors.Is(err, keyring.ErrErased) {
		return Erased, nil
	}
	if err != nil {
		return "", fmt.Errorf("sealing: open %s %s: %w", typ, path, err)
	}
	return string(plain), nil
}

// node is a compiled declaration: the members to descend into, whether the
// value itself is sealed, and whether a customerId member of the object
// names the subject of what it holds. Arrays are transparent: a node
// applies to each element.
type node struct {
	children   map[string]*node // "*": any member
	leaf       bool
	customerID bool
}

func (n *node) child(key string) *node {
	if c, ok := n.children[key]; ok {
		return c
	}
	return n.children["*"]
}

func (n *node) add(path string) *node {
	cur := n
	if path == "" {
		return cur
	}
	for _, k := range strings.Split(path, ".") {
		if cur.children == nil {
			cur.children = map[string]*node{}
		}
		c, ok := cur.children[k]
		if !ok {
			c = &node{}
			cur.children[k] = c
		}
		cur = c
	}
	return cur
}

// leafKeys are the last member names of the sealed paths: an event none of
// whose values under these names is a non-empty string has nothing to seal.
func leafKeys(paths []string) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	for _, p := range paths {
		k := p[strings.LastIndexByte(p, '.')+1:]
		if k == "*" {
			k = p[:max(0, strings.LastIndexByte(p, '.'))]
			k = k[strings.LastIndexByte(k, '.')+1:]
			// A map's values: look for its name followed by an object.
			out = append(out, []byte(`"`+k+`":{"`))
			continue
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, []byte(`"`+k+`":"`))
		}
	}
	return out
}

// mayHold reports whether data may hold a non-empty value under one of keys.
func mayHold(data []byte, keys [][]byte) bool {
	for _, k := range keys {
		rest := data
		for {
			i := bytes.Index(rest, k)
			if i < 0 {
				break
			}
			rest = rest[i+len(k):]
			if len(rest) > 0 && rest[0] != '"' && rest[0] != '}' {
				return true
			}
		}
	}
	return false
}

// transform rewrites the strings of raw that n marks as leaves (seal), or
// every string starting with Prefix (open), path being the dotted member
// names from the event's root (array indexes left out).
//
// Any text may start with Prefix, so a value that does is not taken for a
// sealed one: sealing seals every declared leaf, whatever it holds (but
// when resealing, see there), and opening fails only on a declared leaf.
// Elsewhere a value that does not open is plain text that looks sealed,
// and is left as it is; a value that opens elsewhere can only have been
// sealed for this very event type and path.
type transform struct {
	ctx  context.Context
	keys Keys
	typ  string
	seal bool
	// resealing seals what a version without sealing wrote, where a
	// value that opens is sealed already: events seal runs again after an
	// interruption.
	resealing bool
	// erased is set when a value was written Erased instead of sealed
	// (its subject's key was destroyed): the data then no longer opens to
	// what was given.
	erased bool
}

func (t *transform) value(raw jsontext.Value, n *node, subject keyring.Subject, path string) (jsontext.Value, error) {
	switch raw.Kind() {
	case '"':
		if t.seal && (n == nil || !n.leaf) {
			return raw, nil
		}
		if !t.seal && !bytes.HasPrefix(raw, quotedPrefix) {
			return raw, nil
		}
		plain, err := jsontext.AppendUnquote(nil, raw)
		if err != nil {
			return nil, err
		}
		var out string
		switch {
		case t.seal && len(plain) == 0:
			return raw, nil
		case t.seal && t.resealing && bytes.HasPrefix(plain, []byte(Prefix)) && t.opens(path, string(plain)):
			return raw, nil
		case t.seal:
			if subject == "" {
				return nil, fmt.Errorf("sealing: no subject for %s %s", t.typ, path)
			}
			out, err = sealValue(t.ctx, t.keys, subject, t.typ, path, string(plain))
			if errors.Is(err, keyring.ErrErased) {
				// A forgotten subject's data is not kept: their money
				// still moves (an escrow they sell settles), named so.
				out, err, t.erased = Erased, nil, true
			}
		default:
			out, err = openValue(t.ctx, t.keys, t.typ, path, string(plain))
			if err != nil && (n == nil || !n.leaf) {
				return raw, nil // plain text that looks sealed
			}
		}
		if err != nil {
			return nil, err
		}
		return jsontext.AppendQuote(nil, out)
	case '[', '{':
		// Opening: a part holding nothing sealed stays as it is, without
		// a walk through it.
		if !t.seal && !bytes.Contains(raw, quotedPrefix) {
			return raw, nil
		}
		if raw.Kind() == '[' {
			return t.array(raw, n, subject, path)
		}
		return t.object(raw, n, subject, path)
	}
	return raw, nil
}

func (t *transform) array(raw jsontext.Value, n *node, subject keyring.Subject, path string) (jsontext.Value, error) {
	if t.seal && n == nil {
		return raw, nil
	}
	d := newDecoder(raw)
	if _, err := d.ReadToken(); err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(raw)+64)
	out = append(out, '[')
	for i := 0; d.PeekKind() != ']'; i++ {
		v, err := d.ReadValue()
		if err != nil {
			return nil, err
		}
		nv, err := t.value(raw[d.InputOffset()-int64(len(v)):d.InputOffset()], n, subject, path)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, nv...)
	}
	return append(out, ']'), nil
}

func (t *transform) object(raw jsontext.Value, n *node, subject keyring.Subject, path string) (jsontext.Value, error) {
	if t.seal && n == nil {
		return raw, nil
	}
	d := newDecoder(raw)
	if _, err := d.ReadToken(); err != nil {
		return nil, err
	}
	type member struct {
		key   string
		value jsontext.Value
	}
	members := make([]member, 0, 16)
	for d.PeekKind() != '}' {
		k, err := d.ReadToken()
		if err != nil {
			return nil, err
		}
		key := k.String()
		v, err := d.ReadValue()
		if err != nil {
			return nil, err
		}
		end := d.InputOffset()
		members = append(members, member{key, raw[end-int64(len(v)) : end]})
	}
	if t.seal && n.customerID {
		for _, m := range members {
			if m.key == "customerId" && m.value.Kind() == '"' {
				if id, err := jsontext.AppendUnquote(nil, m.value); err == nil && len(id) > 0 {
					subject = keyring.Customer(string(id))
				}
			}
		}
	}
	out := make([]byte, 0, len(raw)+64)
	out = append(out, '{')
	for i, m := range members {
		p := m.key
		if path != "" {
			p = path + "." + m.key
		}
		var c *node
		if n != nil {
			c = n.child(m.key)
		}
		v, err := t.value(m.value, c, subject, p)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, ',')
		}
		if out, err = jsontext.AppendQuote(out, m.key); err != nil {
			return nil, err
		}
		out = append(out, ':')
		out = append(out, v...)
	}
	return append(out, '}'), nil
}

// OpenEvent returns an event's data with every sealed value opened.
func OpenEvent(ctx context.Context, keys Keys, typ string, data []byte) ([]byte, error) {
	return open(ctx, keys, typ, data)
}

// newDecoder reads raw in place (a bytes.Buffer is parsed without a copy);
// the values it returns are sliced from raw by offset, so they outlive it.
func newDecoder(raw []byte) *jsontext.Decoder {
	return jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true))
}

// opens reports whether v is a value sealed at path of t's event type.
func (t *transform) opens(path, v string) bool {
	_, err := openValue(t.ctx, t.keys, t.typ, path, v)
	return err == nil
}

// open returns data with every sealed value of it opened.
func open(ctx context.Context, keys Keys, typ string, data []byte) ([]byte, error) {
	if !Sealed(data) {
		return data, nil
	}
	t := &transform{ctx: ctx, keys: keys, typ: typ}
	var root *node
	if r, ok := rules[typ]; ok {
		root = r.root
	}
	return t.value(jsontext.Value(data), root, "", "")
}
