package v1_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Each bad upgrade request is refused naming its field; a good one gets
// its default surge.
func TestDecodeUpgradeRequest(t *testing.T) {
	for body, field := range map[string]string{
		`{}`:                   "image",
		`{"image":"Bad Name"}`: "image",
		`{"image":"n","kubernetesVersion":"1.x"}`:            "kubernetesVersion",
		`{"image":"n","maxSurge":-1}`:                        "maxSurge",
		`{"image":"n","maxSurge":51}`:                        "maxSurge",
		`{"abort":true,"image":"n"}`:                         "image",
		`{"abort":true,"kubernetesVersion":"v1.2.3"}`:        "kubernetesVersion",
		`{"abort":true,"maxSurge":2}`:                        "maxSurge",
		`{"image":"n","surge":1}`:                            "surge",
		`{"abort":true,"freshDisk":["m2"]}`:                  "freshDisk",
		`{"image":"n","freshDisk":["M2"]}`:                   "freshDisk[0]",
		`{"image":"n","freshDisk":["m2","m2"]}`:              "freshDisk[1]",
		`{"freshDisk":["m2"],"maxSurge":2}`:                  "maxSurge",
		`{"freshDisk":["m2"],"kubernetesVersion":"v1.34.2"}`: "kubernetesVersion",
	} {
		_, err := v1.DecodeUpgradeRequest(strings.NewReader(body))
		var fe *v1.FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: %v, want a refusal of %s", body, err, field)
		}
	}
	u, err := v1.DecodeUpgradeRequest(strings.NewReader(`{"image":"harmony-node-1-1-0","kubernetesVersion":"v1.34.2"}`))
	if err != nil || u.MaxSurge != 1 {
		t.Errorf("good request: %+v, %v", u, err)
	}
	if a, err := v1.DecodeUpgradeRequest(strings.NewReader(`{"abort":true}`)); err != nil || !a.Abort {
		t.Errorf("abort: %+v, %v", a, err)
	}
	if a, err := v1.DecodeUpgradeRequest(strings.NewReader(`{"freshDisk":["c-m2"]}`)); err != nil || a.Image != "" || len(a.FreshDisk) != 1 {
		t.Errorf("amendment: %+v, %v", a, err)
	}
}

// FuzzDecodeUpgradeRequest: a refusal is a FieldError, and what is
// accepted is accepted again after a round trip.
func FuzzDecodeUpgradeRequest(f *testing.F) {
	f.Add([]byte(`{"image":"harmony-node-1-1-0","kubernetesVersion":"v1.34.2","maxSurge":3}`))
	f.Add([]byte(`{"abort":true}`))
	f.Add([]byte(`{"image":"n","freshDisk":["c-m2"]}`))
	f.Add([]byte(`{"image":"n","maxSurge":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := v1.DecodeUpgradeRequest(bytes.NewReader(data))
		if err != nil {
			var fe *v1.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("refusal is not a FieldError: %v", err)
			}
			return
		}
		again, _ := json.Marshal(u)
		if _, err := v1.DecodeUpgradeRequest(bytes.NewReader(again)); err != nil {
			t.Fatalf("accepted request fails after a round trip: %v\n%s", err, again)
		}
	})
}
