// Package promconfig is Harmony's Prometheus configuration: a scraper's
// credential, a scrape config that finds every agent through the
// controller and scrapes the controller, and the alerting rules.
// harmonyctl writes them for an operator's Prometheus, the lab for its
// own.
package promconfig

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"text/template"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

// Files in the directory Write fills.
const (
	ConfigFile = "prometheus.yml"
	RulesFile  = "harmony.rules.yml"
	CAFile     = "ca.crt"
)

//go:embed prometheus.yml.tmpl
var configTemplate string

var scrapeConfig = template.Must(template.New(ConfigFile).Parse(configTemplate))

// Rules are Harmony's alerting rules; harmony.rules_test.yml tests them
// with promtool.
//
//go:embed harmony.rules.yml
var Rules []byte

// Credential is a scraper's key and certificate, and the CA that
// verifies agents and the controller, all PEM.
type Credential struct {
	Key, Certificate, CA []byte
}

// WriteCredential writes cred into dir as NAME.key (0600), NAME.crt and
// ca.crt, and returns their paths. The names inside dir are ours, so an
// existing file at one is replaced, never followed (dir may be shared,
// like /tmp).
func WriteCredential(dir, name string, cred Credential) (key, cert, ca string, err error) {
	key, cert, ca = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".crt"), filepath.Join(dir, CAFile)
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{key, cred.Key, 0o600}, {cert, cred.Certificate, 0o644}, {ca, cred.CA, 0o644}} {
		if err := atomicfile.Write(f.path, f.data, f.mode); err != nil {
			return "", "", "", err
		}
	}
	return key, cert, ca, nil
}

// WriteConfig writes into dir, beside the credential WriteCredential
// wrote there for name, prometheus.yml for the controller at controller
// (its https URL) and the alerting rules. It returns the config's path.
func WriteConfig(dir, name string, controller *url.URL) (string, error) {
	if controller.Scheme != "https" || controller.Host == "" {
		return "", fmt.Errorf("controller URL %q: want https://HOST:PORT", controller)
	}
	targets := url.URL{Scheme: "https", Host: controller.Host, Path: v1.PathMetricsTargets}
	var conf bytes.Buffer
	err := scrapeConfig.Execute(&conf, struct{ CA, Cert, Key, Controller, Targets, Rules string }{
		CA: CAFile, Cert: name + ".crt", Key: name + ".key",
		Controller: controller.Host, Targets: targets.String(), Rules: RulesFile,
	})
	if err != nil {
		return "", err
	}
	if err := atomicfile.Write(filepath.Join(dir, RulesFile), Rules, 0o644); err != nil {
		return "", err
	}
	path := filepath.Join(dir, ConfigFile)
	return path, atomicfile.Write(path, conf.Bytes(), 0o644)
}
