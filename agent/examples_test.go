package agent

import (
	"testing"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/config/servicesdir"
)

// The shipped examples must stay valid and programmable.
func TestExamplesAreValid(t *testing.T) {
	a, err := config.LoadAgent("../examples/lvsd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := servicesdir.LoadDir("../examples/services.d")
	if err != nil {
		t.Fatal(err)
	}
	d, err := planner.Build(a, svcs)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Services) == 0 || len(d.VIPs) == 0 {
		t.Fatalf("examples produce no IPVS services or VIPs: %+v", d)
	}
}
