package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// Where the LDAP settings and their bind password are kept.
const (
	settingLDAP = "ldap"
	secretLDAP  = "ldap"
)

type ldapSecret struct {
	BindPassword string `json:"bindPassword"`
}

// LDAP returns the LDAP settings without the bind password;
// store.ErrNotFound when there are none.
func (s *Service) LDAP() (v1.LDAP, error) {
	var l v1.LDAP
	err := s.cfg.Store.View(func(tx *store.Tx) error { return tx.Get(store.Settings, settingLDAP, &l) })
	return l, err
}

// directory returns the directory the stored settings describe, with its
// bind password; nil when there are none. It is read for every sign-in
// and refresh, so a change applies to the next one.
func (s *Service) directory() (*directory, error) {
	var l v1.LDAP
	var sec ldapSecret
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if err := tx.Get(store.Settings, settingLDAP, &l); err != nil {
			return err
		}
		return tx.Get(store.Secrets, secretLDAP, &sec)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l.BindPassword = sec.BindPassword
	return newDirectory(l)
}

// ApplyLDAP checks settings against the directory (a TLS connection, the
// service account's bind, both search bases) and stores them. Without a
// bind password it keeps the stored one, unless the URL, the bind DN, the
// CA or StartTLS changed: the password is never sent where it was not
// given for.
func (s *Service) ApplyLDAP(ctx context.Context, l v1.LDAP) (v1.LDAP, bool, error) {
	old, err := s.directory()
	if err != nil {
		return v1.LDAP{}, false, err
	}
	existed := old != nil
	if l.BindPassword == "" {
		if !existed {
			return v1.LDAP{}, false, &v1.FieldError{Field: "bindPassword", Problem: "is required when LDAP is first applied"}
		}
		if changed := destinationChange(old.cfg, l); changed != "" {
			return v1.LDAP{}, false, &v1.FieldError{Field: "bindPassword", Problem: changed + " changed: give bindPassword again"}
		}
		l.BindPassword = old.cfg.BindPassword
	}
	d, err := newDirectory(l)
	if err != nil {
		return v1.LDAP{}, false, &v1.FieldError{Field: "ca", Problem: err.Error()}
	}
	if err := d.check(ctx); err != nil {
		return v1.LDAP{}, false, err
	}
	l.UpdatedAt = s.now().UTC()
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := tx.Put(store.Settings, settingLDAP, l.Redacted()); err != nil {
			return err
		}
		return tx.Put(store.Secrets, secretLDAP, ldapSecret{BindPassword: l.BindPassword})
	})
	if err != nil {
		return v1.LDAP{}, false, err
	}
	s.log.Info("ldap applied", "url", l.URL, "bind_dn", l.BindDN, "group_roles", len(l.GroupRoles), "created", !existed)
	return l.Redacted(), !existed, nil
}

// destinationChange names the first setting that decides where the bind
// password goes, or whom it trusts there, that differs between old and l;
// "" when none does. A new CA could vouch for any server at the same URL.
func destinationChange(old, l v1.LDAP) string {
	switch {
	case old.URL != l.URL:
		return "url"
	case old.BindDN != l.BindDN:
		return "bindDN"
	case old.CA != l.CA:
		return "ca"
	case old.StartTLS != l.StartTLS:
		return "startTLS"
	}
	return ""
}

// DeleteLDAP removes the settings and ends every directory user's
// sessions: with no directory, none can be checked again.
func (s *Service) DeleteLDAP() (int, error) {
	ended := 0
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if !tx.Has(store.Settings, settingLDAP) {
			return fmt.Errorf("ldap settings: %w", store.ErrNotFound)
		}
		var users []string
		err := tx.List(store.Users, "", func(name string, data []byte) error {
			var u userRecord
			if err := json.Unmarshal(data, &u); err != nil {
				return err
			}
			if u.Source == v1.UserSourceLDAP {
				users = append(users, name)
			}
			return nil
		})
		if err != nil {
			return err
		}
		ended, err = deleteRecords(tx, store.Sessions, func(r sessionRecord) bool { return slices.Contains(users, r.User) })
		if err != nil {
			return err
		}
		if err := tx.Delete(store.Settings, settingLDAP); err != nil {
			return err
		}
		return tx.Delete(store.Secrets, secretLDAP)
	})
	if err == nil {
		s.log.Info("ldap deleted", "sessions_ended", ended)
	}
	return ended, err
}

// LookupLDAPUser looks a user up as a sign-in would, without a password.
func (s *Service) LookupLDAPUser(ctx context.Context, name string) (v1.LDAPUserInfo, error) {
	d, err := s.directory()
	if err != nil {
		return v1.LDAPUserInfo{}, err
	}
	if d == nil {
		return v1.LDAPUserInfo{}, fmt.Errorf("ldap settings: %w", store.ErrNotFound)
	}
	u, err := d.lookup(ctx, normalName(name))
	if errors.Is(err, errNotInDirectory) {
		return v1.LDAPUserInfo{}, fmt.Errorf("user %q in the directory: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return v1.LDAPUserInfo{}, err
	}
	groups := u.Groups
	if groups == nil {
		groups = []string{}
	}
	return v1.LDAPUserInfo{Username: u.Name, DN: u.DN, Groups: groups, Role: u.Role}, nil
}

// recordFromDirectory records a directory user who has not signed in yet,
// so that they can be granted a role first. A known user, or no
// directory, is left to the caller.
func (s *Service) recordFromDirectory(ctx context.Context, name string) error {
	if _, err := s.User(name); !errors.Is(err, store.ErrNotFound) {
		return err
	}
	d, err := s.directory()
	if err != nil || d == nil {
		return err
	}
	du, err := d.lookup(ctx, name)
	switch {
	case errors.Is(err, errNotInDirectory):
		return nil
	case err != nil:
		return err
	case du.Role == "":
		// Not one who may sign in: a grant would be of no use.
		return nil
	}
	_, err = s.recordDirectoryUser(du)
	if errors.Is(err, ErrBadCredentials) {
		return nil // a local user of the name came first
	}
	return err
}
