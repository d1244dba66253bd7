package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// Grants are keyed cluster/kind/subject, so one cluster's are one prefix
// and go with it (DeleteClusterGrants, in the cluster's last step).
func grantKey(cluster, kind, subject string) string { return cluster + "/" + kind + "/" + subject }

// Grant gives a user or a group a role on an existing cluster, replacing
// the subject's earlier grant there. A directory user who has not signed
// in yet is looked up in the directory and recorded.
func (s *Service) Grant(ctx context.Context, cluster string, req v1.GrantRequest, by string) (v1.Grant, error) {
	g := v1.Grant{Cluster: cluster, Kind: v1.GrantKindUser, Subject: req.User, Role: req.Role, CreatedAt: s.now().UTC(), By: by}
	if req.Group != "" {
		g.Kind, g.Subject = v1.GrantKindGroup, req.Group
	}
	if g.Kind == v1.GrantKindUser {
		if err := s.recordFromDirectory(ctx, g.Subject); err != nil {
			return v1.Grant{}, err
		}
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if !tx.Has(store.Clusters, cluster) {
			return fmt.Errorf("cluster %q: %w", cluster, store.ErrNotFound)
		}
		if g.Kind == v1.GrantKindUser && !tx.Has(store.Users, g.Subject) {
			return fmt.Errorf("user %q: %w", g.Subject, store.ErrNotFound)
		}
		return tx.Put(store.Grants, grantKey(cluster, g.Kind, g.Subject), g)
	})
	if err != nil {
		return v1.Grant{}, err
	}
	s.log.Info("granted", "cluster", cluster, g.Kind, g.Subject, "role", g.Role, "by", by)
	return g, nil
}

// Revoke removes a subject's grant on a cluster.
func (s *Service) Revoke(cluster, kind, subject, by string) error {
	if kind != v1.GrantKindUser && kind != v1.GrantKindGroup {
		return fmt.Errorf("grant kind %q (user or group): %w", kind, store.ErrNotFound)
	}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		key := grantKey(cluster, kind, subject)
		if !tx.Has(store.Grants, key) {
			return fmt.Errorf("%s %q has no grant on cluster %q: %w", kind, subject, cluster, store.ErrNotFound)
		}
		return tx.Delete(store.Grants, key)
	})
	if err == nil {
		s.log.Info("revoked", "cluster", cluster, kind, subject, "by", by)
	}
	return err
}

// Grants lists one existing cluster's grants (store.ErrNotFound for no
// such cluster), or every cluster's for "".
func (s *Service) Grants(cluster string) ([]v1.Grant, error) {
	prefix := ""
	if cluster != "" {
		prefix = cluster + "/"
	}
	var out []v1.Grant
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if cluster != "" && !tx.Has(store.Clusters, cluster) {
			return fmt.Errorf("cluster %q: %w", cluster, store.ErrNotFound)
		}
		return tx.List(store.Grants, prefix, func(_ string, data []byte) error {
			var g v1.Grant
			if err := json.Unmarshal(data, &g); err != nil {
				return err
			}
			out = append(out, g)
			return nil
		})
	})
	return out, err
}

// member is a user with their groups, as grants name them.
type member struct {
	user   string
	groups map[string]bool
}

func newMember(user string, groups []string) member {
	m := member{user: user, groups: map[string]bool{}}
	for _, g := range groups {
		m.groups[g] = true
	}
	return m
}

func (m member) holds(g v1.Grant) bool {
	return g.Kind == v1.GrantKindUser && g.Subject == m.user || g.Kind == v1.GrantKindGroup && m.groups[g.Subject]
}

// Roles returns, per cluster, the strongest role a user has there, by
// their own grants and their groups'.
func (s *Service) Roles(user string, groups []string) (map[string]v1.GrantRole, error) {
	return s.roles(newMember(user, groups), "")
}

// RoleOn is the strongest role a user has on one cluster, "" for none.
func (s *Service) RoleOn(user string, groups []string, cluster string) (v1.GrantRole, error) {
	roles, err := s.roles(newMember(user, groups), cluster)
	return roles[cluster], err
}

func (s *Service) roles(m member, cluster string) (map[string]v1.GrantRole, error) {
	grants, err := s.Grants(cluster)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // no cluster, no role on it
	}
	if err != nil {
		return nil, err
	}
	out := map[string]v1.GrantRole{}
	for _, g := range grants {
		if m.holds(g) && !out[g.Cluster].AtLeast(g.Role) {
			out[g.Cluster] = g.Role
		}
	}
	return out, nil
}

// DeleteClusterGrants removes a cluster's grants in the transaction that
// removes the cluster, so a new cluster of the same name starts with none.
func DeleteClusterGrants(tx *store.Tx, cluster string) error {
	return tx.DeletePrefix(store.Grants, cluster+"/")
}

func deleteUserGrants(tx *store.Tx, user string) error {
	_, err := deleteRecords(tx, store.Grants, func(g v1.Grant) bool { return g.Kind == v1.GrantKindUser && g.Subject == user })
	return err
}

// ErrBeyondCluster refuses a cluster-scoped action on a user whose access
// reaches past that cluster.
var ErrBeyondCluster = errors.New("reaches beyond this cluster")

// EndSessionsOn ends every session of a user who holds a grant on cluster,
// directly or through a group, and on no other cluster: what a cluster
// admin may do to the users of their cluster, and no one else. Sessions
// are controller-wide, so ending those of a controller admin, or of a
// user of other clusters too, is for a controller admin (EndSessions).
func (s *Service) EndSessionsOn(cluster, user string) (int, error) {
	u, err := s.User(user)
	if err != nil {
		return 0, fmt.Errorf("user %q: %w", user, err)
	}
	roles, err := s.Roles(user, u.Groups)
	if err != nil {
		return 0, err
	}
	if roles[cluster] == "" {
		return 0, fmt.Errorf("user %q with a grant on cluster %q: %w", user, cluster, store.ErrNotFound)
	}
	if u.Role == v1.UserRoleAdmin {
		return 0, fmt.Errorf("user %q is a controller admin, whose access %w; a controller admin may end their sessions", user, ErrBeyondCluster)
	}
	for other := range roles {
		if other != cluster {
			return 0, fmt.Errorf("user %q also has a role on cluster %q: their access %w; a controller admin may end their sessions", user, other, ErrBeyondCluster)
		}
	}
	n := 0
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		n, err = endSessions(tx, user)
		return err
	})
	if err == nil {
		s.log.Info("user's sessions ended for a cluster", "cluster", cluster, "user", user, "ended", n)
	}
	return n, err
}
