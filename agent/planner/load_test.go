package planner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/config/servicesdir"
)

// built is a configuration of one agent file and one service file, and
// what Build made of it.
type built struct {
	Agent    *config.Agent
	Services []*config.Service
	Desired  Desired
}

// loadOne builds the desired state of an agent with one service file.
func loadOne(t *testing.T, yaml string) built {
	t.Helper()
	dir := t.TempDir()
	agentFile := filepath.Join(dir, "lvsd.yaml")
	serviceFile := filepath.Join(dir, "services.d", "svc.yaml")
	if err := os.MkdirAll(filepath.Dir(serviceFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agentFile, []byte("node: d1\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(serviceFile, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	agent, err := config.LoadAgent(agentFile)
	if err != nil {
		t.Fatal(err)
	}
	services, err := servicesdir.Load(agent)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Build(agent, services)
	if err != nil {
		t.Fatal(err)
	}
	return built{Agent: agent, Services: services, Desired: d}
}
