package v1

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// DecodeNetworkGuestinfo decodes the value of NetworkGuestinfoKey: base64
// of a NetworkConfig's JSON, as the controller writes it. Surrounding
// whitespace (a newline from vmware-rpctool) is ignored. On failure it
// returns no config and an error carrying a *FieldError, which names the
// field when one is at fault.
func DecodeNetworkGuestinfo(value []byte) (*NetworkConfig, error) {
	// The limit applies before decoding, like DecodeBootstrap's, so that
	// an oversized value is never copied.
	if len(value) > MaxBootstrapBytes {
		return nil, &FieldError{Problem: fmt.Sprintf("network config is larger than %d bytes", MaxBootstrapBytes)}
	}
	data, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(value)))
	if err != nil {
		return nil, &FieldError{Problem: fmt.Sprintf("network config is not base64: %v", err)}
	}
	n, err := DecodeNetworkConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("network config: %w", err)
	}
	return n, nil
}

// EncodeGuestinfo returns the config as the value of NetworkGuestinfoKey.
func (n *NetworkConfig) EncodeGuestinfo() (string, error) {
	data, err := json.Marshal(n)
	if err != nil {
		return "", fmt.Errorf("encode network config: %w", err)
	}
	return base64.StdEncoding.EncodeToString(data), nil
}
