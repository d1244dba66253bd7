package v1

import (
	"errors"
	"testing"
	"time"
)

// No decoder of outside input has a map today; one that does gets the
// same checks in its keys and values, and a time (which decodes itself)
// passes.
func TestExactNamesInMaps(t *testing.T) {
	type doc struct {
		Labels map[string]struct {
			Value string `json:"value"`
		} `json:"labels"`
		When time.Time `json:"when"`
	}
	for in, want := range map[string]string{
		`{"labels":{"a":{"value":"1"},"a":{"value":"2"}}}`: "labels.a",
		`{"labels":{"a":{"Value":"1"}}}`:                   "labels.a.Value",
	} {
		var fe *FieldError
		if err := unmarshalStrict([]byte(in), &doc{}); !errors.As(err, &fe) || fe.Field != want {
			t.Errorf("%s: %v, want an error at %s", in, err, want)
		}
	}
	if err := unmarshalStrict([]byte(`{"labels":{"a":{"value":"1"},"A":{"value":"2"}},"when":"2026-12-01T00:00:00Z"}`), &doc{}); err != nil {
		t.Errorf("map keys differing in case are two keys: %v", err)
	}
}
