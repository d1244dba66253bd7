package cluster

import "fmt"

// ErrorKind classifies a refusal; the HTTP layer maps each to a status
// and a stable code.
type ErrorKind int

// Refusals.
const (
	// Invalid: the request itself is wrong (a bad count, a master where a
	// worker is needed, an unknown version).
	Invalid ErrorKind = iota + 1
	// NotFound: the cluster, node, provider or image does not exist.
	NotFound
	// Conflict: the request clashes with the cluster's state (it exists,
	// it is being deleted, it changed meanwhile, an address is taken).
	Conflict
	// PrecheckFailed: vCenter or the provider cannot take the change
	// (datastores, compute, addresses, VRRP router IDs).
	PrecheckFailed
	// Unreachable: vCenter could not be asked.
	Unreachable
)

// Error is a refused request: what kind, which field, and why.
type Error struct {
	Kind    ErrorKind
	Field   string
	Message string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Message
	}
	return e.Message
}

func refuse(kind ErrorKind, field, format string, args ...any) *Error {
	return &Error{Kind: kind, Field: field, Message: fmt.Sprintf(format, args...)}
}
