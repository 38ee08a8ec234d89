package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs"
)

// failingIPVS is the fake kernel refusing new services.
type failingIPVS struct{ *ipvs.Fake }

func (failingIPVS) AddService(context.Context, ipvs.Service) error {
	return errors.New("no room")
}

// A reload request through the API answers once the kernel has the new
// configuration, and says when it was rejected or could not be applied.
func TestRequestReload(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a, stop := e.running()
	waitFor(t, 10*time.Second, "the first pass", func() bool {
		svcs, _ := e.ipvs.Services(t.Context())
		return len(svcs) == 1
	})

	for _, step := range []struct {
		name      string
		edit      func()
		changed   int
		changes   bool // the kernel changed
		rejected  bool
		errorWith string
	}{
		{"nothing changed", func() {}, 0, false, false, ""},
		{"a backend added", func() {
			e.service("web", webTwo+"  - {address: 10.0.0.13}\n")
		}, 1, true, false, ""},
		{"a broken file", func() {
			e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: nowhere}\n")
		}, 0, false, true, "web.yaml:5"},
		{"a service the kernel refuses", func() {
			e.service("web", webTwo)
			e.service("api", "service: api\nvip: 10.0.0.51\nports: [80]\nbackends: [{address: 10.0.0.11}]\n")
			// Run reads its kernel after this request reaches it.
			a.opts.Kernel.IPVS = failingIPVS{e.ipvs}
		}, 2, true, false, "no room"},
	} {
		before := len(e.ipvs.Ops())
		step.edit()
		res, err := a.RequestReload(t.Context())
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		msg := ""
		if res.Err != nil {
			msg = res.Err.Error()
		}
		if res.Changed != step.changed || res.Rejected != step.rejected || (res.Changes > 0) != step.changes ||
			!strings.Contains(msg, step.errorWith) || (step.errorWith == "") != (msg == "") {
			t.Errorf("%s: %+v, want %d changed, changes %t, rejected %t, an error with %q", step.name, res,
				step.changed, step.changes, step.rejected, step.errorWith)
		}
		if kernelChanged := len(e.ipvs.Ops()) > before; step.errorWith == "" && kernelChanged != step.changes {
			t.Errorf("%s: the kernel changed %t, want %t", step.name, kernelChanged, step.changes)
		}
	}
	stop()
	if _, err := a.RequestReload(context.Background()); err == nil {
		t.Error("a reload request to a stopped agent succeeded")
	}
}
