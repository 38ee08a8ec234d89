package director

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/views"
)

// Runtime control over the sockets of a running director: the control
// socket drains a backend and names what does not exist; the read-only
// socket shows the override and refuses every change.
func TestBackendControlOverSockets(t *testing.T) {
	o, _, _ := setup(t, false)
	dir := filepath.Dir(o.ConfigPath)
	roSocket := filepath.Join(dir, "lvsd-ro.sock")
	body, err := os.ReadFile(o.ConfigPath)
	must(t, err)
	body = []byte(strings.Replace(string(body), "api: {socket: ",
		fmt.Sprintf("api: {read_only_socket: %s, read_only_group: \"%d\", socket: ", roSocket, os.Getgid()), 1))
	must(t, os.WriteFile(o.ConfigPath, body, 0o600))
	o.Config, err = agent.LoadConfig(o.ConfigPath)
	must(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	control, readOnly := api.NewClient(o.Config.Agent.APISocket), api.NewClient(roSocket)
	var st views.Status
	for deadline := time.Now().Add(10 * time.Second); readOnly.Do(ctx, "GET", views.RouteStatus, &st) != nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no status on the read-only socket")
		}
	}

	drain := views.RouteBackend + "drain?service=web&backend=10.0.0.11"
	if err := readOnly.Do(ctx, "POST", drain, nil); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("drain on the read-only socket: %v, want a refusal", err)
	}
	var changed views.BackendState
	if err := control.Do(ctx, "POST", drain, &changed); err != nil {
		t.Fatal(err)
	}
	want := []views.KernelWeight{{IPVSService: "tcp:10.0.0.50:80", Destination: "10.0.0.11:80", Weight: 0}}
	if !changed.Drained || !slices.Equal(changed.Kernel, want) || changed.ConfiguredWeight != 1 {
		t.Errorf("drain answered %+v, want drained with kernel %v", changed, want)
	}
	for route, msg := range map[string]string{
		views.RouteBackend + "drain?service=web&backend=10.0.0.99":           `service "web" has no backend 10.0.0.99 (its backends: 10.0.0.11)`,
		views.RouteBackend + "drain?service=mail&backend=10.0.0.11":          `no service "mail" is configured (configured: web)`,
		views.RouteBackend + "weight?service=web&backend=10.0.0.11&weight=x": `weight "x" is not a whole number`,
	} {
		if err := control.Do(ctx, "POST", route, nil); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("POST %s: %v, want %q", route, err, msg)
		}
	}

	var answer views.BackendList
	err = readOnly.Do(ctx, "GET", views.RouteBackends, &answer)
	if list := answer.Backends; err != nil || answer.Schema != api.SchemaVersion || len(list) != 1 || !list[0].Drained {
		t.Errorf("overrides on the read-only socket: %+v, %v", answer, err)
	}
	if err := readOnly.Do(ctx, "GET", views.RouteStatus, &st); err != nil {
		t.Fatal(err)
	}
	if d := st.Services[0].Destinations[0]; d.Override == nil || !d.Override.Drained || d.Weight != 0 {
		t.Errorf("status on the read-only socket: %+v", d)
	}
}
