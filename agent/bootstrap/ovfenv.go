package bootstrap

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

const ovfEnvNS = "http://schemas.dmtf.org/ovf/environment/1"

// maxOVFEnvBytes bounds the OVF environment document.
const maxOVFEnvBytes = 1 << 20

// OVFEnv reads the document from the harmony.bootstrap property of the OVF
// environment: from guestinfo.ovfEnv (the com.vmware.guestInfo transport)
// or from a file (the ISO transport's ovf-env.xml).
type OVFEnv struct {
	Reader GuestinfoReader
	Path   string
}

func (o OVFEnv) Name() string {
	if o.Path != "" {
		return "OVF environment " + o.Path
	}
	return "OVF environment guestinfo.ovfEnv"
}

func (o OVFEnv) Read(ctx context.Context) ([]byte, error) {
	var doc []byte
	switch {
	case o.Path != "":
		f, err := os.Open(o.Path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrAbsent
		}
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if doc, err = io.ReadAll(io.LimitReader(f, maxOVFEnvBytes+1)); err != nil {
			return nil, err
		}
	case o.Reader != nil:
		v, err := o.Reader.Get(ctx, "guestinfo.ovfEnv")
		if err != nil {
			return nil, err
		}
		doc = []byte(v)
	}
	if len(bytes.TrimSpace(doc)) == 0 {
		return nil, ErrAbsent
	}
	value, err := ParseOVFEnvProperty(doc, v1.OVFPropertyKey)
	if err != nil {
		return nil, err
	}
	if value == "" {
		return nil, ErrAbsent
	}
	return []byte(value), nil
}

// ClearToken cannot edit an OVF environment; the used token is refused by
// the controller anyway.
func (o OVFEnv) ClearToken(context.Context, *v1.Bootstrap) error { return nil }

type ovfEnvironment struct {
	XMLName    xml.Name `xml:"http://schemas.dmtf.org/ovf/environment/1 Environment"`
	Properties []struct {
		Key   string `xml:"http://schemas.dmtf.org/ovf/environment/1 key,attr"`
		Value string `xml:"http://schemas.dmtf.org/ovf/environment/1 value,attr"`
	} `xml:"http://schemas.dmtf.org/ovf/environment/1 PropertySection>Property"`
}

// ParseOVFEnvProperty returns the value of one property of an OVF
// environment document, or "" if it has none of that key.
func ParseOVFEnvProperty(doc []byte, key string) (string, error) {
	if len(doc) > maxOVFEnvBytes {
		return "", fmt.Errorf("OVF environment is larger than %d bytes", maxOVFEnvBytes)
	}
	var env ovfEnvironment
	dec := xml.NewDecoder(bytes.NewReader(doc))
	dec.Strict = true
	if err := dec.Decode(&env); err != nil {
		return "", fmt.Errorf("OVF environment: %w", err)
	}
	value, seen := "", false
	for _, p := range env.Properties {
		if p.Key == key {
			if seen {
				return "", fmt.Errorf("OVF environment: property %q appears twice", key)
			}
			value, seen = p.Value, true
		}
	}
	return value, nil
}
