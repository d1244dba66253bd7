package bootstrap_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

var (
	caOnce sync.Once
	caPEM  string
	caErr  error
)

// testCAPEM is a real self-signed CA certificate, made once, so that the
// documents below pass DecodeBootstrap's caBundle check.
func testCAPEM(tb testing.TB) string {
	tb.Helper()
	caOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			caErr = err
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(1),
			Subject:               pkix.Name{CommonName: "harmony test CA"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(24 * time.Hour),
			KeyUsage:              x509.KeyUsageCertSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			caErr = err
			return
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			caErr = err
			return
		}
		caPEM = string(v1.EncodeCertificatesPEM(cert))
	})
	if caErr != nil {
		tb.Fatalf("make test CA: %v", caErr)
	}
	return caPEM
}

const testToken = "0123456789abcdef.0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// testDoc is a valid bootstrap document for node name.
func testDoc(tb testing.TB, name string) *v1.Bootstrap {
	tb.Helper()
	return &v1.Bootstrap{
		APIVersion:  v1.APIVersion,
		Kind:        "Bootstrap",
		Controllers: []string{"https://controller.example.com:8443"},
		CABundle:    testCAPEM(tb),
		NodeName:    name,
		Token:       testToken,
	}
}

func docJSON(tb testing.TB, b *v1.Bootstrap) []byte {
	tb.Helper()
	data, err := json.Marshal(b)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func docBase64(tb testing.TB, b *v1.Bootstrap) string {
	tb.Helper()
	enc, err := b.EncodeGuestinfo()
	if err != nil {
		tb.Fatal(err)
	}
	return enc
}

// ovfEnv renders an OVF environment document as vSphere writes it (to
// guestinfo.ovfEnv, or as ovf-env.xml on the transport ISO), with the
// given properties in order. Each property is a key and a value.
func ovfEnv(props ...[2]string) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<Environment
     xmlns="http://schemas.dmtf.org/ovf/environment/1"
     xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xmlns:oe="http://schemas.dmtf.org/ovf/environment/1"
     xmlns:ve="http://www.vmware.com/schema/ovfenv"
     oe:id=""
     ve:vCenterId="vm-4711">
   <PlatformSection>
      <Kind>VMware ESXi</Kind>
      <Version>8.0.2</Version>
      <Vendor>VMware, Inc.</Vendor>
      <Locale>en</Locale>
   </PlatformSection>
   <PropertySection>
`)
	for _, p := range props {
		fmt.Fprintf(&b, "         <Property oe:key=\"%s\" oe:value=\"%s\"/>\n", xmlEscape(p[0]), xmlEscape(p[1]))
	}
	b.WriteString(`   </PropertySection>
   <ve:EthernetAdapterSection>
      <ve:Adapter ve:mac="00:50:56:8a:12:34" ve:network="VM Network" ve:unitNumber="7"/>
   </ve:EthernetAdapterSection>
</Environment>
`)
	return b.Bytes()
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

// memGuestinfo is an in-memory GuestinfoReader. It stands in for the
// VMware hypervisor's guestinfo store (the backdoor port, or
// vmware-rpctool), which exists only inside a VMware VM and so cannot be
// reached from a test.
type memGuestinfo struct {
	mu   sync.Mutex
	vals map[string]string
	err  error // if set, Get fails with it
	gets int
}

func newMemGuestinfo(kv ...string) *memGuestinfo {
	m := &memGuestinfo{vals: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		m.vals[kv[i]] = kv[i+1]
	}
	return m
}

func (m *memGuestinfo) Get(_ context.Context, key string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	if m.err != nil {
		return "", m.err
	}
	return m.vals[key], nil // an unset key reads as "", as on VMware
}

func (m *memGuestinfo) Set(_ context.Context, key, value string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.vals[key] = value
	return nil
}

func (m *memGuestinfo) get(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vals[key]
}
