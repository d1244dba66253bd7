package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/netaddr"
)

// AuditLogFile is where every audited request is appended as a JSON line
// (0600, in the data directory), for shipping elsewhere.
const AuditLogFile = "audit.log"

// auditRetention is how long the store keeps audit entries; the file
// keeps everything until it is rotated.
const auditRetention = 90 * 24 * time.Hour

// maxAuditList bounds one answer of GET PathAudit.
const maxAuditList = 1000

// audited reports whether a request is recorded: every change (anything
// but GET), enrollment and logins included, except the nodes' own
// reports and renewals, which come every few seconds.
func audited(method string, perm permission) bool {
	return method != http.MethodGet && perm.name != permNode.name
}

// Refusals of callers who have not authenticated are audited within a
// budget per source (netaddr.SourceKey), so that nobody can fill the disk
// with them: a burst of anonymousBurst entries, then anonymousPerMinute.
// The rest are counted, in a metric and in the source's next recorded
// entry (Suppressed). Everything an authenticated caller does, and every
// anonymous request that succeeds (an enrollment, a login), is recorded.
const (
	anonymousBurst     = 60
	anonymousPerMinute = 60
	// anonymousSources bounds the sources tracked; past it, refusals from
	// new sources share one budget.
	anonymousSources = 10000
	otherSources     = "other sources"
)

// anonymousBudget is what each source may still write.
type anonymousBudget struct {
	mu      sync.Mutex
	sources map[string]*sourceBudget
}

type sourceBudget struct {
	tokens     float64
	last       time.Time
	suppressed int
}

// admit reports whether a refusal from source is recorded and, if so, how
// many of the source's refusals were left out since its last recorded one.
func (b *anonymousBudget) admit(source string, now time.Time) (bool, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sources == nil {
		b.sources = map[string]*sourceBudget{}
	}
	s := b.sources[source]
	if s == nil {
		if len(b.sources) >= anonymousSources {
			b.forgetRefilled(now)
		}
		if len(b.sources) >= anonymousSources {
			source = otherSources
		}
		if s = b.sources[source]; s == nil {
			s = &sourceBudget{tokens: anonymousBurst, last: now}
			b.sources[source] = s
		}
	}
	s.tokens, s.last = s.refilled(now), now
	if s.tokens < 1 {
		s.suppressed++
		return false, 0
	}
	s.tokens--
	n := s.suppressed
	s.suppressed = 0
	return true, n
}

// refilled is what the source may write at now.
func (s *sourceBudget) refilled(now time.Time) float64 {
	return min(anonymousBurst, s.tokens+now.Sub(s.last).Minutes()*anonymousPerMinute)
}

// forgetRefilled drops the sources whose budget is whole again and who
// have nothing left out: they are as good as new.
func (b *anonymousBudget) forgetRefilled(now time.Time) {
	for k, s := range b.sources {
		if s.suppressed == 0 && s.refilled(now) >= anonymousBurst {
			delete(b.sources, k)
		}
	}
}

// auditLog records entries in the store and appends them to the file.
type auditLog struct {
	store *store.Store
	path  string
	seq   atomic.Uint64
	// anonymous bounds what unauthenticated refusals write.
	anonymous anonymousBudget

	mu   sync.Mutex
	file *os.File
}

func newAuditLog(st *store.Store, dataDir string) *auditLog {
	return &auditLog{store: st, path: filepath.Join(dataDir, AuditLogFile)}
}

// auditSubjectKey carries, in a request's context, where a public route's
// handler names who the request was about (a login's user name).
type auditSubjectKey struct{}

// setAuditSubject names the user a public request acted for.
func setAuditSubject(r *http.Request, name string) {
	if p, ok := r.Context().Value(auditSubjectKey{}).(*string); ok {
		*p = name
	}
}

func withAuditSubject(r *http.Request) (*http.Request, *string) {
	subject := new(string)
	return r.WithContext(context.WithValue(r.Context(), auditSubjectKey{}, subject)), subject
}

// admit reports whether entry e is recorded, filling in how many were
// left out before it (see anonymousBudget).
func (a *auditLog) admit(e *v1.AuditEntry, remote netip.Addr, now time.Time) bool {
	if e.Actor != anonymousActor || e.Status < 400 {
		return true
	}
	source := otherSources
	if remote.IsValid() {
		source = netaddr.SourceKey(remote)
	}
	ok, suppressed := a.anonymous.admit(source, now)
	e.Suppressed = suppressed
	return ok
}

// record stores one entry and appends it to the file; a failure is the
// caller's to log, the request's answer stands.
func (a *auditLog) record(e v1.AuditEntry) error {
	key := fmt.Sprintf("%019d-%06d", e.Time.UnixNano(), a.seq.Add(1)%1e6)
	// Batched: concurrent requests (a fleet enrolling) share one commit.
	err := a.store.Batch(func(tx *store.Tx) error {
		if err := tx.Put(store.Audit, key, e); err != nil {
			return err
		}
		// Entries are keyed by time: the oldest come first.
		cutoff := fmt.Sprintf("%019d", e.Time.Add(-auditRetention).UnixNano())
		var old []string
		err := tx.List(store.Audit, "", func(k string, _ []byte) error {
			if k >= cutoff {
				return errStopList
			}
			old = append(old, k)
			return nil
		})
		if err != nil && !errors.Is(err, errStopList) {
			return err
		}
		for _, k := range old {
			if err := tx.Delete(store.Audit, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit store: %w", err)
	}
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.file != nil && a.rotated() {
		a.file.Close()
		a.file = nil
	}
	if a.file == nil {
		if a.file, err = os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
			return fmt.Errorf("audit file: %w", err)
		}
	}
	if _, err := a.file.Write(append(line, '\n')); err != nil {
		// The disk, or the file removed: reopen on the next entry.
		a.file.Close()
		a.file = nil
		return fmt.Errorf("audit file: %w", err)
	}
	return nil
}

// rotated reports whether the open file is no longer at the path (moved
// away by logrotate, or removed), so that entries go to the new file.
func (a *auditLog) rotated() bool {
	open, err := a.file.Stat()
	if err != nil {
		return true
	}
	atPath, err := os.Stat(a.path)
	return err != nil || !os.SameFile(open, atPath)
}

// errStopList ends a listing early.
var errStopList = errors.New("stop")

func (a *auditLog) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.file != nil {
		a.file.Close()
		a.file = nil
	}
}

// list returns the entries since, newest last, that match cluster and
// user when set; at most maxAuditList, the newest ones.
func (a *auditLog) list(since time.Time, cluster, user string) ([]v1.AuditEntry, error) {
	var out []v1.AuditEntry
	from := fmt.Sprintf("%019d", since.UnixNano())
	err := a.store.View(func(tx *store.Tx) error {
		return tx.List(store.Audit, "", func(k string, data []byte) error {
			if k < from {
				return nil
			}
			var e v1.AuditEntry
			if err := json.Unmarshal(data, &e); err != nil {
				return err
			}
			if cluster != "" && e.Cluster != cluster || user != "" && e.User != user {
				return nil
			}
			out = append(out, e)
			if len(out) > maxAuditList {
				out = out[1:]
			}
			return nil
		})
	})
	return out, err
}

func (c *Controller) handleAudit(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	q := r.URL.Query()
	var since time.Time
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			if since, err = time.Parse(time.RFC3339, v); err != nil {
				return badInput(&v1.FieldError{Field: "since", Problem: fmt.Sprintf("%q is neither a duration (24h) nor an RFC 3339 time", v)})
			}
		} else {
			since = c.now().Add(-d)
		}
	}
	entries, err := c.audit.list(since, q.Get("cluster"), q.Get("user"))
	if err != nil {
		return internalError("audit", err)
	}
	writeJSON(w, http.StatusOK, v1.AuditList{Items: entries})
	return nil
}

// anonymousActor is the actor of a caller who has not authenticated.
const anonymousActor = "anonymous"

// auditEntry is what route records for one request.
func auditEntry(r *http.Request, pattern string, who principal, subject string, status int, code string, now time.Time) v1.AuditEntry {
	e := v1.AuditEntry{Time: now.UTC(), Method: r.Method, Route: pattern, Path: r.URL.Path, Remote: r.RemoteAddr,
		Status: status, Code: code, Cluster: r.PathValue("name")}
	if !strings.HasPrefix(pattern, r.Method+" "+v1.PathClusters) {
		e.Cluster = ""
	}
	switch {
	case who.kind == kindUser:
		e.User = who.name
		e.Actor = "user " + who.name
	case who.kind != "":
		e.Actor = who.kind + " " + who.name
		if who.kind == v1.OrgAdmins {
			e.User = who.name
		}
	default:
		e.Actor = anonymousActor
		e.User = subject
	}
	return e
}
