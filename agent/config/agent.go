package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"
)

// Role says what an lvsd agent does on its host.
type Role string

// Roles.
const (
	RoleDirector   Role = "director"
	RoleRealServer Role = "realserver"
)

// Agent is the validated agent file.
type Agent struct {
	File        string // where it was read from
	Node        string
	Role        Role
	Interface   string // the director's uplink, where VIPs go
	ServicesDir string
	StateDir    string
	APISocket   string
	LogFormat   string     // text | json
	LogLevel    string     // debug | info | warn | error
	RealServer  RealServer // role realserver only (realserver.go)
	Cluster     *Cluster   // role director only; nil: no cluster, this director holds every VIP (cluster.go)
	// MetricsListen is the TCP address /metrics is served on; "" = off (metrics.go).
	MetricsListen string
}

// Defaults for keys an agent file may omit.
const (
	DefaultServicesDir = "/etc/lvsd/services.d"
	DefaultStateDir    = "/var/lib/lvsd"
	DefaultAPISocket   = "/run/lvsd/lvsd.sock"
)

type rawAgent struct {
	Node        string `yaml:"node"`
	Role        string `yaml:"role"`
	Interface   string `yaml:"interface"`
	ServicesDir string `yaml:"services_dir"`
	StateDir    string `yaml:"state_dir"`
	API         struct {
		Socket string `yaml:"socket"`
	} `yaml:"api"`
	Log struct {
		Format string `yaml:"format"`
		Level  string `yaml:"level"`
	} `yaml:"log"`
	Metrics struct {
		Listen string `yaml:"listen"`
	} `yaml:"metrics"`
	RealServer *rawRealServer `yaml:"realserver"`
	Cluster    *rawCluster    `yaml:"cluster"`
}

// LoadAgent reads and validates the agent file at path. A relative
// services_dir or state_dir is taken relative to the file's folder.
func LoadAgent(path string) (*Agent, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoConfig)
	}
	if err != nil {
		return nil, err
	}
	var errs List
	docs := parseDocs(path, data, &errs)
	if len(errs) > 0 {
		return nil, errs
	}
	if len(docs) != 1 {
		return nil, List{{File: path, Msg: fmt.Sprintf("want exactly one YAML document, found %d", len(docs))}}
	}
	d := docs[0]
	var raw rawAgent
	if err := yaml.NodeToValue(d.body, &raw, yaml.Strict()); err != nil {
		return nil, List{yamlError(path, err)}
	}
	hostname, _ := os.Hostname()
	a := &Agent{
		File:        path,
		Node:        orDefault(raw.Node, hostname),
		Role:        Role(orDefault(raw.Role, string(RoleDirector))),
		Interface:   raw.Interface,
		ServicesDir: relativeTo(path, orDefault(raw.ServicesDir, DefaultServicesDir)),
		StateDir:    relativeTo(path, orDefault(raw.StateDir, DefaultStateDir)),
		APISocket:   relativeTo(path, orDefault(raw.API.Socket, DefaultAPISocket)),
		LogFormat:   orDefault(raw.Log.Format, "text"),
		LogLevel:    orDefault(raw.Log.Level, "info"),
	}
	a.RealServer = d.realServer(a.Role, raw.RealServer, raw.Interface)
	a.MetricsListen = d.metricsListen(raw.Metrics.Listen)
	a.Cluster = d.cluster(a.Role, raw.Cluster, path)
	switch a.Role {
	case RoleDirector:
		if a.Interface == "" {
			d.errorf("$", "interface is required for role director (the interface that holds the VIPs)")
		}
	case RoleRealServer:
	default:
		d.errorf("$.role", "role %q is not one of director, realserver", raw.Role)
	}
	if !oneOf(a.LogFormat, "text", "json") {
		d.errorf("$.log.format", "log format %q is not one of text, json", a.LogFormat)
	}
	if !oneOf(a.LogLevel, "debug", "info", "warn", "error") {
		d.errorf("$.log.level", "log level %q is not one of debug, info, warn, error", a.LogLevel)
	}
	return a, errs.err()
}

// parseDocs parses data into its YAML documents, skipping empty ones.
func parseDocs(file string, data []byte, errs *List) []*doc {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		*errs = append(*errs, yamlError(file, err))
		return nil
	}
	var docs []*doc
	for _, d := range f.Docs {
		if d.Body == nil || len(bytes.TrimSpace([]byte(d.Body.String()))) == 0 {
			continue
		}
		docs = append(docs, &doc{file: file, body: d.Body, errs: errs})
	}
	return docs
}

func orDefault(v, def string) string {
	if strings.TrimSpace(v) == "" {
		return def
	}
	return v
}

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

func relativeTo(file, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(file), p)
}
