package ovf

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
)

// FuzzParseOVF: Parse never panics, and whatever it accepts renders and
// parses back to the same descriptor.
func FuzzParseOVF(f *testing.F) {
	d := sample()
	d.Network = "nic0"
	seed, err := Render(d)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`<Envelope/>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			return
		}
		out, err := Render(d)
		if err != nil {
			t.Fatalf("accepted descriptor does not render: %v", err)
		}
		d2, err := Parse(out)
		if err != nil {
			t.Fatalf("own rendering does not parse: %v", err)
		}
		out2, _ := Render(d2)
		if !bytes.Equal(out, out2) {
			t.Fatal("render is not stable across a parse")
		}
	})
}

// The fuzzing engine barely advances on this machine, so also push a few
// thousand seeded random mutations of a real descriptor through the same
// property on every test run.
func TestParseMutations(t *testing.T) {
	d := sample()
	d.Network = "nic0"
	seed, err := Render(d)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	accepted := 0
	for range 3000 {
		b := bytes.Clone(seed)
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] = byte(rng.IntN(256))
		}
		got, err := Parse(b)
		if err != nil {
			continue
		}
		accepted++
		out, err := Render(got)
		if err != nil {
			t.Fatalf("accepted descriptor does not render: %v\n%s", err, b)
		}
		if again, err := Parse(out); err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("accepted descriptor does not round-trip: %v\n%s", err, b)
		}
	}
	t.Logf("%d of 3000 mutations accepted", accepted)
}
