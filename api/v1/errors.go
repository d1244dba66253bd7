package v1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// FieldError is a validation failure of one field of an outside document.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Problem
	}
	return e.Field + ": " + e.Problem
}

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Error is the JSON body of every 4xx and 5xx answer of the controller.
type Error struct {
	// Code is a stable, machine-readable reason, such as "token_used".
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// ErrorBody wraps Error, so that a client can tell an error body apart.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Stable error codes. Clients, logs and metrics use them as reasons.
const (
	CodeBadRequest       = "bad_request"
	CodeBodyTooLarge     = "body_too_large"
	CodeTokenMalformed   = "token_malformed"
	CodeTokenUnknown     = "token_unknown"
	CodeTokenExpired     = "token_expired"
	CodeTokenUsed        = "token_used"
	CodeCSRInvalid       = "csr_invalid"
	CodeCSRSignature     = "csr_bad_signature"
	CodeWeakKey          = "weak_key"
	CodeCNMismatch       = "cn_mismatch"
	CodeSANNotInventory  = "san_not_in_inventory"
	CodeNoClientCert     = "client_certificate_required"
	CodeBadClientCert    = "client_certificate_invalid"
	CodeForbidden        = "forbidden"
	CodeNodeGone         = "node_gone"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodeInternal         = "internal"
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeVCenterUnreachable: the provider's vCenter did not answer or
	// refused the login.
	CodeVCenterUnreachable = "vcenter_unreachable"
	// CodePrecheckFailed: vCenter lacks what a request needs (template,
	// space, memory, network, addresses); nothing was created.
	CodePrecheckFailed = "precheck_failed"
	// CodeUnavailable: the controller is shutting down; try again soon
	// (503, with Retry-After).
	CodeUnavailable = "unavailable"
	// CodeInsufficientStorage: the controller's disk is full (507).
	CodeInsufficientStorage = "insufficient_storage"
	// CodeCertRevoked: an admin or scraper certificate that an admin
	// revoked, or that the controller has no record of.
	CodeCertRevoked = "certificate_revoked"
	// CodePasswordRequired: a change that would send a stored secret to a
	// different place needs the secret again.
	CodePasswordRequired = "password_required"
	// CodeLastAdmin: revoking the last valid admin certificate would lock
	// every admin out.
	CodeLastAdmin = "last_admin"
)

// decodeStrict decodes exactly one JSON value from at most limit bytes of r
// into v, refusing unknown fields and trailing data. The error names the
// field where the decoder can tell.
func decodeStrict(r io.Reader, limit int64, v any) error {
	data, err := readLimited(r, limit)
	if err != nil {
		return err
	}
	return unmarshalStrict(data, v)
}

// decodeOptional is decodeStrict for a body that may be left empty: an
// empty one leaves v as it is (the defaults).
func decodeOptional(r io.Reader, limit int64, v any) error {
	data, err := readLimited(r, limit)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return err
	}
	return unmarshalStrict(data, v)
}

// readLimited reads all of r, refusing more than limit bytes.
func readLimited(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(data)) > limit {
		return nil, &FieldError{Problem: fmt.Sprintf("document is larger than %d bytes", limit)}
	}
	return data, nil
}

func unmarshalStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return &FieldError{Problem: "document is empty"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonFieldError(err)
	}
	if dec.More() {
		return &FieldError{Problem: "trailing data after the JSON document"}
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		return &FieldError{Problem: "trailing data after the JSON document"}
	}
	return exactNames(data, reflect.TypeOf(v), "")
}

func jsonFieldError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fieldErr(typeErr.Field, "must be a %s, not a JSON %s", typeErr.Type, typeErr.Value)
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return fieldErr("", "malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	}
	// encoding/json reports unknown fields only as text.
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		name := strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
		return fieldErr(name, "unknown field")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fieldErr("", "truncated JSON document")
	}
	return fieldErr("", "malformed JSON: %v", err)
}
