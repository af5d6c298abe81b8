// Converting events to and from KurrentDB's records.

package kurrent

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"

	"github.com/escrowd/escrowd/eventstore"
)

// metadataKey is the property that carries an event's metadata JSON.
const metadataKey = "escrowd-metadata"

func toEventData(in []eventstore.EventData) ([]kurrentdb.EventData, error) {
	out := make([]kurrentdb.EventData, len(in))
	for i, e := range in {
		meta, err := wrapMetadata(e.Metadata)
		if err != nil {
			return nil, err
		}
		data := e.Data
		if len(data) == 0 {
			data = []byte("null")
		}
		out[i] = kurrentdb.EventData{
			EventID:     e.ID,
			EventType:   e.Type,
			ContentType: kurrentdb.ContentTypeJson,
			Data:        data,
			Metadata:    meta,
		}
	}
	return out, nil
}

func wrapMetadata(meta []byte) ([]byte, error) {
	if meta == nil {
		return nil, nil
	}
	if !json.Valid(meta) {
		return nil, errors.New("eventstore: event metadata is not valid JSON")
	}
	return json.Marshal(map[string]string{metadataKey: string(meta)})
}

// unwrapMetadata returns the metadata an event was appended with. Events
// written by other clients keep their metadata as stored, unless it only
// holds the server's own ($-prefixed) properties.
func unwrapMetadata(stored []byte) []byte {
	if len(stored) == 0 {
		return nil
	}
	var props map[string]json.RawMessage
	if err := json.Unmarshal(stored, &props); err != nil {
		return stored
	}
	if raw, ok := props[metadataKey]; ok {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return []byte(s)
		}
	}
	for k := range props {
		if !strings.HasPrefix(k, "$") {
			return stored
		}
	}
	return nil
}

func isSystem(e *kurrentdb.RecordedEvent) bool {
	return strings.HasPrefix(e.StreamID, "$") || strings.HasPrefix(e.EventType, "$")
}

func toRecorded(e *kurrentdb.RecordedEvent) eventstore.RecordedEvent {
	return eventstore.RecordedEvent{
		ID:         e.EventID,
		Stream:     e.StreamID,
		Revision:   e.EventNumber,
		Position:   eventstore.Position{Commit: e.Position.Commit, Prepare: e.Position.Prepare},
		Type:       e.EventType,
		Data:       e.Data,
		Metadata:   unwrapMetadata(e.UserMetadata),
		RecordedAt: e.CreatedDate,
	}
}
