package eventstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// Events name their tenant in their metadata (domain.Meta): the merchant
// under MetaMerchantKey and the environment under MetaEnvironmentKey. A
// store may index these keys (PostgreSQL does: es_events_tenant_idx).
const (
	MetaMerchantKey    = "merchantId"
	MetaEnvironmentKey = "environment"
)

// TenantFilter selects one merchant environment's events: those whose
// metadata names both. Type, when set, is an exact event type, or a prefix
// when it ends in "." ("escrow." is every escrow event). From and To, when
// set, bound the time the event was recorded: From inclusive, To exclusive.
type TenantFilter struct {
	MerchantID  string
	Environment string
	Type        string
	From, To    time.Time
}

// TypePrefix reports whether Type is a prefix rather than an exact type.
func (f TenantFilter) TypePrefix() bool { return strings.HasSuffix(f.Type, ".") }

// Matches reports whether e passes f (the reference semantics of
// TenantReader, used by stores that scan).
func (f TenantFilter) Matches(e RecordedEvent) bool {
	switch {
	case f.Type != "" && f.TypePrefix() && !strings.HasPrefix(e.Type, f.Type),
		f.Type != "" && !f.TypePrefix() && e.Type != f.Type,
		!f.From.IsZero() && e.RecordedAt.Before(f.From),
		!f.To.IsZero() && !e.RecordedAt.Before(f.To):
		return false
	}
	m, env, ok := TenantOf(e.Metadata)
	return ok && m == f.MerchantID && env == f.Environment
}

// TenantOf reads the tenant an event's metadata names: the string values
// of its top-level MetaMerchantKey and MetaEnvironmentKey (names matched
// exactly; of a name given twice, the last, as PostgreSQL's json operators
// read it). ok is false unless the metadata is one JSON object in which
// both are non-empty strings; when it is such an object, what it names is
// returned even so ("" for a name it lacks). Every reader of the log asks
// this of every event, so it scans the object without building it, and
// reads the shape domain.Meta writes without a decoder at all (metaPrefix).
func TenantOf(metadata []byte) (merchant, environment string, ok bool) {
	if len(metadata) == 0 {
		return "", "", false
	}
	if m, env, ok := tenantOfMeta(metadata); ok {
		return m, env, true
	}
	return tenantOfTokens(metadata)
}

// tenantOfTokens is TenantOf for any metadata: it reads the object token by
// token, skipping the values of other names.
func tenantOfTokens(metadata []byte) (merchant, environment string, ok bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(metadata), jsontext.AllowDuplicateNames(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", "", false
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return "", "", false
		}
		var into *string
		switch name.String() {
		case MetaMerchantKey:
			into = &merchant
		case MetaEnvironmentKey:
			into = &environment
		default:
			if dec.SkipValue() != nil {
				return "", "", false
			}
			continue
		}
		v, err := dec.ReadToken()
		if err != nil || v.Kind() != '"' {
			return "", "", false
		}
		*into = v.String()
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return "", "", false
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return "", "", false
	}
	return merchant, environment, merchant != "" && environment != ""
}

// metaPrefix and metaInfix frame the tenant in the metadata domain.Meta
// writes: {"merchantId":"M","environment":"E",...}.
const (
	metaPrefix = `{"` + MetaMerchantKey + `":"`
	metaInfix  = `","` + MetaEnvironmentKey + `":"`
)

// tenantOfMeta is TenantOf for metadata in domain.Meta's shape, at a
// third of the cost; ok is false for anything else, which TenantOf then
// reads token by token. The shape is taken when the two values hold no
// backslash (so each ends at the first quote, and is its bytes) and the
// whole is valid JSON (RFC 7493 as jsontext checks it: one value, so the
// object it starts as, whose names are unique, so each read is the last).
func tenantOfMeta(b []byte) (merchant, environment string, ok bool) {
	m, rest, found := cutValue(b, metaPrefix)
	if !found {
		return "", "", false
	}
	env, _, found := cutValue(rest, metaInfix)
	if !found || !jsontext.Value(b).IsValid() {
		return "", "", false
	}
	return string(m), string(env), true
}

// cutValue reads, after prefix, a non-empty string value up to its closing
// quote; found is false if it holds a backslash.
func cutValue(b []byte, prefix string) (value, rest []byte, found bool) {
	b, found = bytes.CutPrefix(b, []byte(prefix))
	if !found {
		return nil, nil, false
	}
	i := bytes.IndexByte(b, '"')
	if i <= 0 || bytes.IndexByte(b[:i], '\\') >= 0 {
		return nil, nil, false
	}
	return b[:i], b[i:], true
}

// TenantReader is implemented by stores that read one tenant's events
// without scanning every other tenant's.
type TenantReader interface {
	// ReadTenant returns up to limit events matching f strictly after
	// position after, in global order, skipping the first skip of them.
	// As ReadAll, it never returns an event while an earlier one may still
	// commit, so a reader advancing after by the last event returned sees
	// every matching event exactly once.
	ReadTenant(ctx context.Context, f TenantFilter, after Position, skip, limit int) ([]RecordedEvent, error)
	// CountTenant counts the events matching f that ReadTenant can return.
	CountTenant(ctx context.Context, f TenantFilter) (int64, error)
}

// ReadTenant reads a tenant's events through the store's TenantReader, or,
// for a store without one, by scanning ReadAll: correct, but it reads
// every tenant's events up to the page.
func ReadTenant(ctx context.Context, s Store, f TenantFilter, after Position, skip, limit int) ([]RecordedEvent, error) {
	if tr, ok := s.(TenantReader); ok {
		return tr.ReadTenant(ctx, f, after, skip, limit)
	}
	var out []RecordedEvent
	err := scanTenant(ctx, s, f, after, func(e RecordedEvent) bool {
		if skip > 0 {
			skip--
			return true
		}
		out = append(out, e)
		return len(out) < limit
	})
	return out, err
}

// CountTenant counts a tenant's events as ReadTenant does.
func CountTenant(ctx context.Context, s Store, f TenantFilter) (int64, error) {
	if tr, ok := s.(TenantReader); ok {
		return tr.CountTenant(ctx, f)
	}
	var n int64
	err := scanTenant(ctx, s, f, Start, func(RecordedEvent) bool { n++; return true })
	return n, err
}

// scanTenant calls each with the events matching f after position after,
// in order, until it returns false or the log ends.
func scanTenant(ctx context.Context, s Store, f TenantFilter, after Position, each func(RecordedEvent) bool) error {
	const page = 1000
	for {
		events, err := s.ReadAll(ctx, after, page)
		if err != nil {
			return err
		}
		for _, e := range events {
			if f.Matches(e) && !each(e) {
				return nil
			}
		}
		if len(events) < page {
			return nil
		}
		after = events[len(events)-1].Position
	}
}

// ParsePosition reads a position as String writes it ("commit/prepare");
// "0" is Start.
func ParsePosition(s string) (Position, error) {
	if s == "0" {
		return Start, nil
	}
	c, p, ok := strings.Cut(s, "/")
	if !ok {
		return Position{}, fmt.Errorf("position %q is not commit/prepare", s)
	}
	commit, err1 := strconv.ParseUint(c, 10, 64)
	prepare, err2 := strconv.ParseUint(p, 10, 64)
	if err1 != nil || err2 != nil {
		return Position{}, fmt.Errorf("position %q is not commit/prepare", s)
	}
	return Position{Commit: commit, Prepare: prepare}, nil
}
