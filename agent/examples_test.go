package agent

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every agent file in examples/ passes what `lvsd check` runs (LoadConfig:
// the agent file, its services directory, the plan), with the services
// directory beside it as the examples lay it out. The only thing an
// operator must add is a secret, which a repository cannot ship: the
// cluster key, created here as the example's comment says.
func TestExamplesAreValid(t *testing.T) {
	agentFiles, err := filepath.Glob("../examples/*lvsd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("../examples/*/lvsd.yaml")
	agentFiles = append(agentFiles, more...)
	if len(agentFiles) < 4 {
		t.Fatalf("examples: %v, want the director, cluster, ECMP and real-server agent files", agentFiles)
	}
	for _, src := range agentFiles {
		t.Run(strings.TrimPrefix(src, "../examples/"), func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, src, filepath.Join(dir, "lvsd.yaml"))
			services := filepath.Join(filepath.Dir(src), "services.d")
			if _, err := os.Stat(services); err != nil {
				services = "../examples/services.d" // the cluster example shares the single director's
			}
			body, _ := os.ReadFile(src)
			if strings.Contains(string(body), "role: director") {
				copyTree(t, services, filepath.Join(dir, "services.d"))
			}
			if strings.Contains(string(body), "key_file: cluster.key") {
				if err := os.WriteFile(filepath.Join(dir, "cluster.key"), []byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg, err := LoadConfig(filepath.Join(dir, "lvsd.yaml"))
			if err != nil {
				t.Fatalf("lvsd check would say:\n%v", err)
			}
			if cfg.Agent.Role == "director" && (len(cfg.Desired.Services) == 0 || len(cfg.Desired.VIPs) == 0) {
				t.Fatalf("a director example programs nothing: %d IPVS services", len(cfg.Desired.Services))
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		copyFile(t, path, filepath.Join(to, rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
