package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
)

// A key added to the agent file without a reload rule would be read on a
// reload and then silently not used.
func TestEveryAgentKeyHasAReloadRule(t *testing.T) {
	typ := reflect.TypeFor[config.Agent]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		if _, ok := agentKeyRules[f.Name]; !ok {
			t.Errorf("config.Agent.%s has no reload rule in agentKeyRules (applied, refused or restart)", f.Name)
		}
	}
	for name := range agentKeyRules {
		if _, ok := typ.FieldByName(name); !ok {
			t.Errorf("agentKeyRules names %s, which config.Agent does not have", name)
		}
	}
}

func TestReloadRules(t *testing.T) {
	base := "node: d1\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\n"
	tests := []struct {
		name, agentFile string
		refused         string // a substring of the error; "" for none
		restart         []string
	}{
		{"nothing changed", base, "", nil},
		{"services_dir and ipvs are applied", "node: d1\ninterface: eth0\nservices_dir: other.d\nstate_dir: state\nipvs: {timeouts: {tcp: 10m}}\n", "", nil},
		{"interface is refused", "node: d1\ninterface: eth1\nservices_dir: services.d\nstate_dir: state\n", "interface (eth0 → eth1)", nil},
		{"node is refused", "node: d2\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\n", "node (d1 → d2)", nil},
		{"log and metrics.listen wait for a restart", base + "log: {level: debug}\nmetrics: {listen: 127.0.0.1:9797}\n", "",
			[]string{"log.level", "metrics.listen"}},
		{"hooks wait for a restart", base + "hooks: {on_ownership: /bin/true}\n", "", []string{"hooks"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			old, err := LoadConfig(filepath.Join(e.dir, "lvsd.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			writeTestFile(t, filepath.Join(e.dir, "lvsd.yaml"), tt.agentFile)
			if err := os.Mkdir(filepath.Join(e.dir, "other.d"), 0o755); err != nil {
				t.Fatal(err)
			}
			next, err := LoadConfig(filepath.Join(e.dir, "lvsd.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			restart, refused := reloadRules(old.Agent, next.Agent)
			switch {
			case tt.refused == "" && refused != nil:
				t.Errorf("refused: %v", refused)
			case tt.refused != "" && (refused == nil || !strings.Contains(refused.Error(), tt.refused)):
				t.Errorf("refused %v, want it to name %q", refused, tt.refused)
			}
			if slices.Sort(restart); !slices.Equal(restart, tt.restart) {
				t.Errorf("restart %q, want %q", restart, tt.restart)
			}
		})
	}
}

// A reload that changes the interface is rejected as a whole: the running
// configuration stays, the kernel is not touched, and the status says so.
func TestReloadRefusesANewInterface(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	e.reconcile(a)
	writeTestFile(t, filepath.Join(e.dir, "lvsd.yaml"), "node: d1\ninterface: eth1\nservices_dir: services.d\nstate_dir: state\n")
	e.service("web", strings.Replace(webTwo, "80", "81", 1))
	e.reload(a)
	if s := a.snap.Load(); s == nil || !strings.Contains(s.Loaded.Err, "interface (eth0 → eth1)") {
		t.Fatalf("the status does not say why the reload was refused: %+v", s.Loaded)
	}
	if got := e.reconcile(a); len(got) != 0 {
		t.Fatalf("a refused reload changed the kernel: %q", got)
	}
}
