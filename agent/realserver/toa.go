package realserver

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/lvsd/lvsd/agent/config"
)

// TOAStatus is the real server's TOA programs (realserver.client_address)
// as the status shows them: what they were given, and their counters
// read now.
type TOAStatus struct {
	Cgroup    string   `json:"cgroup"`
	Backends  []string `json:"backends"`
	Directors []string `json:"directors"`
	// Error says why the last pass could not set them up; "" when it did.
	Error string `json:"error,omitempty"`
	// Stored counts connections whose peer name is the client's;
	// NotDirector connections to a backend from an address that is not a
	// director's (untouched); NoOption a director's SYNs without a usable
	// option; NoSYN connections whose listener did not keep its SYN
	// (opened before the programs).
	Stored      uint64 `json:"stored"`
	NotDirector uint64 `json:"not_director"`
	NoOption    uint64 `json:"no_option"`
	NoSYN       uint64 `json:"no_saved_syn"`
}

// toaState is what the agent last gave the TOA programs; applied false: a
// pass gives them everything again.
type toaState struct {
	applied bool
	cfg     config.RealServerTOA
	err     error
}

// toaProblem is the weight endpoint's reason when the TOA programs are not
// in place.
const toaProblem = "TOA programs not in place (applications would see the directors' address)"

// toaFailed reports whether realserver.client_address is set and the last
// pass could not set up its programs.
func (st *Status) toaFailed() bool { return st.toa.cfg.Enabled() && st.toa.err != nil }

// reconcileTOA makes the TOA programs what the agent file asks: the
// backends and directors in their maps first, so that the hooks act on
// the right sockets from their first connection, then the cgroup; or,
// without the block, nothing pinned. It changes nothing when the file did
// not change since a pass that succeeded and the objects are still there.
func (a *Agent) reconcileTOA(ctx context.Context) error {
	want, prog := a.cfg.RealServer.TOA, a.opts.Host.TOA
	if !want.Enabled() {
		if prog == nil || !prog.Pinned() {
			a.toa = toaState{applied: true}
			return nil
		}
		err := prog.Remove(ctx)
		a.toa = toaState{applied: err == nil, err: err}
		if err != nil {
			return fmt.Errorf("removing the TOA programs: %w", err)
		}
		a.log.Info("applied", "op", "toa-remove", "object", "the real server's TOA programs", "reason", "no realserver.client_address")
		return nil
	}
	if a.toa.applied && reflect.DeepEqual(a.toa.cfg, want) && prog != nil && prog.Pinned() {
		return nil
	}
	var err error
	if prog == nil {
		err = errors.New("this host cannot run the TOA programs")
	} else {
		err = errors.Join(prog.SetServices(ctx, want.Backends), prog.SetDirectors(ctx, want.Directors))
		if err == nil {
			err = prog.Attach(ctx, want.Cgroup)
		}
	}
	a.toa = toaState{applied: err == nil, cfg: want, err: err}
	if err != nil {
		return fmt.Errorf("setting up the TOA programs (realserver.client_address): %w", err)
	}
	a.log.Info("applied", "op", "toa-attach", "object", want.Cgroup, "backends", len(want.Backends), "directors", len(want.Directors))
	return nil
}

// toaStatus is the TOA programs' status with their counters now; nil
// without the block.
func (a *Agent) toaStatus(ctx context.Context, st *Status) *TOAStatus {
	t := st.toa
	if !t.cfg.Enabled() {
		return nil
	}
	out := &TOAStatus{Cgroup: t.cfg.Cgroup}
	for _, b := range t.cfg.Backends {
		out.Backends = append(out.Backends, b.String())
	}
	for _, d := range t.cfg.Directors {
		out.Directors = append(out.Directors, d.String())
	}
	if t.err != nil {
		out.Error = t.err.Error()
	}
	if prog := a.opts.Host.TOA; prog != nil {
		c, err := prog.Stats(ctx)
		if err != nil && out.Error == "" {
			out.Error = "reading the counters: " + err.Error()
		}
		out.Stored, out.NotDirector, out.NoOption, out.NoSYN = c.Stored, c.NotDirector, c.NoOption, c.NoSYN
	}
	slices.Sort(out.Directors)
	return out
}
