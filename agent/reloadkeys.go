package agent

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/lvsd/lvsd/agent/config"
)

// What a reload does with each key of a director's agent file. Every field
// of config.Agent is in one of these (TestEveryAgentKeyHasAReloadRule), so
// a new key cannot be ignored silently on reload.
//
//   - applied: the next pass uses the new value.
//   - refused: the reload is rejected as a whole and the running
//     configuration kept: the key names what the director is (its node
//     name, role, interface, state), which a running director cannot
//     become without starting over.
//   - restart: the new value is read but what uses it was built at start
//     (a socket, a session, a goroutine); the reload applies the rest and
//     says which keys wait for a restart.
const (
	reloadApplied = "applied"
	reloadRefused = "refused"
	reloadRestart = "restart"
)

// agentKeyRules maps each config.Agent field to its key in the agent file
// and its rule.
var agentKeyRules = map[string]struct{ key, rule string }{
	"File":              {"", reloadApplied}, // where the file is, not a key
	"Node":              {"node", reloadRefused},
	"Role":              {"role", reloadRefused},
	"Interface":         {"interface", reloadRefused},
	"StateDir":          {"state_dir", reloadRefused},
	"ServicesDir":       {"services_dir", reloadApplied},
	"APISocket":         {"api.socket", reloadRestart},
	"ReadOnlyAPI":       {"api.read_only", reloadRestart},
	"LogFormat":         {"log.format", reloadRestart},
	"LogLevel":          {"log.level", reloadRestart},
	"RealServer":        {"realserver", reloadApplied}, // the real-server role's own reload reads it
	"Cluster":           {"cluster", reloadRestart},    // conn_sync's kernel side follows at once (below)
	"BGP":               {"bgp", reloadRestart},
	"IPVS":              {"ipvs", reloadApplied},
	"MetricsListen":     {"metrics.listen", reloadRestart},
	"MetricsPerBackend": {"metrics.per_backend", reloadApplied},
	"Hooks":             {"hooks", reloadRestart},
	"Track":             {"track", reloadRestart},
	"WatchFiles":        {"reload.watch", reloadApplied},
	"LaxModes":          {"strict_modes", reloadApplied},
	"HealthMaxInFlight": {"health_checks.max_in_flight", reloadRestart},
}

// reloadRules compares the running agent file with a reloaded one: restart
// lists the changed keys that wait for a restart, refused is an error when
// a key the reload cannot apply changed.
func reloadRules(old, next *config.Agent) (restart []string, refused error) {
	ov, nv := reflect.ValueOf(*old), reflect.ValueOf(*next)
	var changed []string
	for i := range ov.NumField() {
		f := ov.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		rule, ok := agentKeyRules[f.Name]
		if !ok || rule.key == "" || reflect.DeepEqual(ov.Field(i).Interface(), nv.Field(i).Interface()) {
			continue
		}
		switch rule.rule {
		case reloadRefused:
			changed = append(changed, fmt.Sprintf("%s (%v → %v)", rule.key, ov.Field(i).Interface(), nv.Field(i).Interface()))
		case reloadRestart:
			restart = append(restart, rule.key)
		}
	}
	if len(changed) > 0 {
		refused = fmt.Errorf("%s changed: a running director cannot take that on a reload; restart lvsd to apply it",
			strings.Join(changed, ", "))
	}
	return restart, refused
}
