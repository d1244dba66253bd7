package ovf

import (
	"bytes"
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
