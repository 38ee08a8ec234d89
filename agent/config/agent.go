package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	ReadOnlyAPI *ReadOnlyAPI // nil: no read-only socket (api.go)
	LogFormat   string       // text | json
	LogLevel    string       // debug | info | warn | error
	RealServer  RealServer   // role realserver only (realserver.go)
	Cluster     *Cluster     // role director only; nil: no cluster, this director holds every VIP (cluster.go)
	BGP         *BGP         // role director only; nil: VIPs are announced on the link (ARP), not over BGP (bgp.go)
	IPVS        IPVS         // role director only: namespace-wide IPVS settings (ipvs.go)
	// MetricsListen is the TCP address /metrics is served on; "" = off (metrics.go).
	MetricsListen string
	// MetricsPerBackend: a director exports series per backend (the
	// default) or, when false, per service only (metrics.go).
	MetricsPerBackend bool
	Hooks             *Hooks // role director only; nil: no event hooks (hooks.go)
	Track             *Track // role director only; nil: no upstream check (track.go)
	// WatchFiles (reload.watch, the default): an edit of the agent file or
	// a service file is applied once it settles. false: only a reload
	// request (SIGHUP, systemctl reload) reads the files again.
	WatchFiles bool
	// HealthMaxInFlight (health_checks.max_in_flight) bounds the health
	// checks in flight at once; 0: the default (health.DefaultMaxInFlight,
	// within a quarter of the file descriptor limit).
	HealthMaxInFlight int
	// LaxModes is strict_modes: false. By default lvsd refuses a file it
	// reads or runs as root (the agent file, the services directory and
	// its files, hook and exec check programs) that anyone but root may
	// write, or that is in a directory anyone but root may write
	// (program.CheckFile, program.CheckDirs); with LaxModes it does not
	// check.
	LaxModes bool

	servicesDirAt *Error // where ServicesDir comes from, for its errors
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
	API         rawAPI `yaml:"api"`
	Log         struct {
		Format string `yaml:"format"`
		Level  string `yaml:"level"`
	} `yaml:"log"`
	Metrics struct {
		Listen     string `yaml:"listen"`
		PerBackend *bool  `yaml:"per_backend"`
	} `yaml:"metrics"`
	RealServer *rawRealServer `yaml:"realserver"`
	Cluster    *rawCluster    `yaml:"cluster"`
	BGP        *rawBGP        `yaml:"bgp"`
	IPVS       *rawIPVS       `yaml:"ipvs"`
	Hooks      *rawHooks      `yaml:"hooks"`
	Track      *rawTrack      `yaml:"track"`
	Reload     struct {
		Watch *bool `yaml:"watch"`
	} `yaml:"reload"`
	StrictModes  *bool `yaml:"strict_modes"`
	HealthChecks struct {
		MaxInFlight *int `yaml:"max_in_flight" range:"1-1000000"`
	} `yaml:"health_checks"`
}

// LoadAgent reads and validates the agent file at path. A relative
// services_dir or state_dir is taken relative to the file's folder.
func LoadAgent(path string) (*Agent, error) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoConfig)
	}
	var fi fs.FileInfo
	data, err := readChecked(path, func(f fs.FileInfo) error { fi = f; return nil })
	if err != nil {
		return nil, List{{File: path, Msg: err.Error()}}
	}
	a, err := ParseAgent(path, data)
	if a != nil && !a.LaxModes {
		// Checked once the file says whether to: strict_modes is in it.
		if e := trustedFile(path, fi, nil); e != nil {
			return nil, List{e}
		}
	}
	return a, err
}

// ParseAgent validates data, the content of the agent file at path,
// without reading the file or asking who may write it (LoadAgent does both).
func ParseAgent(path string, data []byte) (*Agent, error) {
	var errs List
	var docs []*doc
	eachDoc(path, data, &errs, func(d *doc) { docs = append(docs, d) })
	if len(errs) > 0 {
		return nil, errs
	}
	switch len(docs) {
	case 0:
		return nil, List{{File: path, Msg: "holds no settings: an agent file is one YAML mapping (at least interface: for a director)"}}
	case 1:
	default:
		second := docs[1]
		line, col := second.Position("$")
		return nil, List{{File: path, Line: line, Col: col,
			Msg: fmt.Sprintf("a second YAML document (the first starts at line %d): an agent file holds exactly one", docs[0].StartLine())}}
	}
	d := docs[0]
	var raw rawAgent
	d.Decode(&raw)
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
		WatchFiles:  raw.Reload.Watch == nil || *raw.Reload.Watch,
		LaxModes:    raw.StrictModes != nil && !*raw.StrictModes,
	}
	d.laxModes = a.LaxModes
	a.ReadOnlyAPI = d.readOnlyAPI(raw.API, path, a.APISocket)
	a.RealServer = d.realServer(a.Role, raw.RealServer, raw.Interface)
	a.MetricsListen = d.metricsListen(raw.Metrics.Listen)
	a.MetricsPerBackend = d.metricsPerBackend(a.Role, raw.Metrics.PerBackend)
	a.Cluster = d.cluster(a.Role, raw.Cluster, path, a.Node)
	if a.Cluster != nil {
		d.vrrp(a.Cluster, raw.Cluster, a.Interface)
	}
	a.BGP = d.bgpBlock(a.Role, raw.BGP, path)
	a.IPVS = d.ipvsBlock(a.Role, raw.IPVS)
	a.Hooks = d.hooks(a.Role, raw.Hooks)
	a.Track = d.track(a.Role, raw.Track)
	if n := raw.HealthChecks.MaxInFlight; n != nil {
		if a.Role != RoleDirector {
			d.Errorf("$.health_checks.max_in_flight", "health_checks is for role director; a real server checks no backends")
		}
		a.HealthMaxInFlight = *n
	}
	if a.Cluster != nil && a.Cluster.Mode == ModeECMP && a.BGP == nil {
		d.Errorf("$.cluster.mode", "mode ecmp needs a bgp block: every director announces every VIP to the routers, which spread the flows")
	}
	switch a.Role {
	case RoleDirector:
		switch {
		case a.Interface == "":
			d.Errorf("$", "interface is required for role director (the interface that holds the VIPs)")
		case !isInterfaceName(a.Interface):
			d.Errorf("$.interface", "%q is not an interface name (1-15 characters, no spaces, slashes or colons)", a.Interface)
		}
		a.servicesDirAt = d.servicesDirAt(raw.ServicesDir != "")
	case RoleRealServer:
		// A key only a director reads would be ignored without a word.
		if raw.ServicesDir != "" {
			d.Errorf("$.services_dir", "services_dir is for role director; a real server does not read it")
		}
	default:
		d.Errorf("$.role", "role %q is not one of director, realserver", raw.Role)
	}
	if !oneOf(a.LogFormat, "text", "json") {
		d.Errorf("$.log.format", "log format %q is not one of text, json", a.LogFormat)
	}
	if !oneOf(a.LogLevel, "debug", "info", "warn", "error") {
		d.Errorf("$.log.level", "log level %q is not one of debug, info, warn, error", a.LogLevel)
	}
	return a, errs.Err()
}

// servicesDirAt records where services_dir is set, for errors about the
// directory (PlaceDirError): at the key, or at the file for the default.
func (d *doc) servicesDirAt(given bool) *Error {
	if !given {
		return &Error{File: d.File}
	}
	line, col := d.Position("$.services_dir")
	return &Error{File: d.File, Line: line, Col: col}
}

func orDefault(v, def string) string {
	if v == "" {
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
