// Package randstr makes random identifiers and secrets from crypto/rand.
package randstr

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Hex returns n random bytes as lower-case hex (2n characters).
func Hex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Lower returns n characters of [a-z0-9], kubeadm's token alphabet.
func Lower(n int) (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	out := make([]byte, 0, n)
	buf := make([]byte, 1)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("random: %w", err)
		}
		// 252 is the largest multiple of 36 below 256: no bias.
		if buf[0] < 252 {
			out = append(out, alphabet[int(buf[0])%len(alphabet)])
		}
	}
	return string(out), nil
}
