// Package redact hides the credentials and personal data of stored events
// from what is shown outside the service: the operator's event export and
// the API's audit trail (GET /v1/events). The rules live here once, so
// both show the same.
package redact

import (
	"encoding/json"
	"fmt"

	"github.com/escrowd/escrowd/domain/customer"
)

// Redacted replaces a credential in an export or the audit trail.
const Redacted = "[redacted]"

// Rules says, per event type, which top-level fields of the
// event's data hold credentials or personal data an export must not carry
// by default, and what they become. A new event type with such a field
// must be added here (TestExportRedactionsCoverTheDomain checks the known
// ones by decoding real events).
var Rules = map[string]map[string]func(json.RawMessage) (any, error){
	"merchant.created":                {"signingSecrets": redactValues},
	"merchant.signing_secret_rotated": {"secret": redactString},
	"merchant.key_issued":             {"digest": redactString},
	// The payluk profile signs with the super-admin keys themselves.
	"merchant.compat_set": {"signingSecrets": redactValues},
	"customer.created":    {"bvn": maskBVN},
	// The hosted checkout's anti-forgery token: whoever holds it and the
	// session id may act on the buyer's page.
	"checkout.opened": {"formToken": redactString},
}

func redactString(json.RawMessage) (any, error) { return Redacted, nil }

// redactValues keeps an object's keys (which environments have a secret)
// and hides the values.
func redactValues(raw json.RawMessage) (any, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = Redacted
	}
	return out, nil
}

// maskBVN shows what the API shows: the last 4 digits.
func maskBVN(raw json.RawMessage) (any, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return customer.MaskBVN(s), nil
}

// Data returns an event's data with its credentials replaced; data
// of other event types is returned unchanged.
func Data(typ string, data json.RawMessage) (json.RawMessage, error) {
	rules, ok := Rules[typ]
	if !ok {
		return data, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, fmt.Errorf("redact %s: %w", typ, err)
	}
	for name, rule := range rules {
		raw, ok := fields[name]
		if !ok || string(raw) == "null" {
			continue
		}
		v, err := rule(raw)
		if err != nil {
			return nil, fmt.Errorf("redact %s.%s: %w", typ, name, err)
		}
		if fields[name], err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(fields)
}
