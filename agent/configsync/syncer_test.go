package configsync

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
)

// net is an in-memory cluster: every director hears every other one
// unless cut.
type net struct {
	mu      sync.Mutex
	syncers map[string]*Syncer
	cut     map[string]bool
}

type netEnd struct {
	n    *net
	self string
}

func (e netEnd) ConfigPeers() []string {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	var out []string
	for name := range e.n.syncers {
		if name != e.self && !e.n.cut[name] && !e.n.cut[e.self] {
			out = append(out, name)
		}
	}
	return out
}

func (e netEnd) SendConfig(member string, msg []byte) error {
	e.n.mu.Lock()
	to, cut := e.n.syncers[member], e.n.cut[member] || e.n.cut[e.self]
	e.n.mu.Unlock()
	if to == nil || cut {
		return errors.New("not heard")
	}
	to.DeliverConfig(bytes.Clone(msg))
	return nil
}

func (e netEnd) SendConfigPacket(member string, msg []byte) error { return e.SendConfig(member, msg) }

const goodService = `service: web
vip: 192.0.2.10
ports: [80]
forwarding: dr
backends:
  - {address: 10.0.0.11}
`

// startDirectors runs a syncer per name over one net, with sources
// publishing, each in a services directory of its own.
func startDirectors(t *testing.T, sources []string, names ...string) (*net, map[string]string) {
	t.Helper()
	dirs := map[string][]ed25519.PublicKey{}
	privs := map[string]ed25519.PrivateKey{}
	for i, n := range names {
		privs[n] = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(i + 1)}, ed25519.SeedSize))
		dirs[n] = []ed25519.PublicKey{identity.Public(privs[n])}
	}
	nw := &net{syncers: map[string]*Syncer{}, cut: map[string]bool{}}
	paths := map[string]string{}
	for _, n := range names {
		paths[n] = t.TempDir() // before the cleanup below, which must run first
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, n := range names {
		s, err := New(Config{Node: n, Dir: paths[n], Sources: sources, Keys: &identity.Keys{Private: privs[n], Directors: dirs},
			Transport: netEnd{nw, n}, LaxModes: true, DigestInterval: 50 * time.Millisecond, ScanInterval: time.Hour,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		nw.mu.Lock()
		nw.syncers[n] = s
		nw.mu.Unlock()
		wg.Go(func() {
			if err := s.Run(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	return nw, paths
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// eventually waits for cond, failing with what says why not.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hasFile(dir, name, want string) func() (bool, string) {
	return func() (bool, string) {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return false, err.Error()
		}
		return string(got) == want, "content " + string(got)
	}
}

func gone(dir, name string) func() (bool, string) {
	return func() (bool, string) {
		_, err := os.Lstat(filepath.Join(dir, name))
		return errors.Is(err, os.ErrNotExist), "still there"
	}
}

func TestSyncPublishesChangesAndRemovals(t *testing.T) {
	nw, dirs := startDirectors(t, []string{"a"}, "a", "b", "c")
	var reloads atomic.Int32
	nw.syncers["b"].SetReload(func(context.Context) { reloads.Add(1) })
	write(t, filepath.Join(dirs["a"], "web.yaml"), goodService)
	for _, n := range []string{"b", "c"} {
		eventually(t, n+" gets web.yaml", hasFile(dirs[n], "web.yaml", goodService))
		if to, err := os.Readlink(filepath.Join(dirs[n], "web.yaml")); err != nil || to != ".cluster/web.yaml" {
			t.Errorf("%s: web.yaml is not the link to the managed file: %q %v", n, to, err)
		}
	}
	changed := strings.Replace(goodService, "10.0.0.11", "10.0.0.12", 1)
	write(t, filepath.Join(dirs["a"], "web.yaml"), changed)
	for _, n := range []string{"b", "c"} {
		eventually(t, n+" gets the change", hasFile(dirs[n], "web.yaml", changed))
	}
	if err := os.Remove(filepath.Join(dirs["a"], "web.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b", "c"} {
		eventually(t, n+" drops web.yaml", gone(dirs[n], "web.yaml"))
	}
	// Each write and the removal asked b's agent to reload at once.
	eventually(t, "b asks for reloads", func() (bool, string) {
		n := reloads.Load()
		return n >= 2, fmt.Sprint(n, " reloads")
	})
}

func TestSyncRefusesBadFileWithPublishersPlace(t *testing.T) {
	nw, dirs := startDirectors(t, []string{"a"}, "a", "b")
	bad := strings.Replace(goodService, "ports: [80]", "ports: [eighty]", 1)
	write(t, filepath.Join(dirs["a"], "bad.yaml"), bad)
	want := "a:" + filepath.Join(dirs["a"], "bad.yaml") + ":3:9:"
	eventually(t, "b refuses bad.yaml", func() (bool, string) {
		msg := nw.syncers["b"].Status().Refused["bad.yaml"]
		return strings.Contains(msg, want), "refused: " + msg
	})
	if _, err := os.Lstat(filepath.Join(dirs["b"], "bad.yaml")); err == nil {
		t.Error("b wrote the refused file")
	}
}

// The operator's own file on a receiver is never replaced, and the
// conflict is reported; the others get the publication.
func TestSyncLeavesLocalFileAlone(t *testing.T) {
	nw, dirs := startDirectors(t, []string{"a"}, "a", "b", "c")
	local := strings.Replace(goodService, "10.0.0.11", "10.0.0.99", 1)
	write(t, filepath.Join(dirs["b"], "web.yaml"), local)
	write(t, filepath.Join(dirs["a"], "web.yaml"), goodService)
	eventually(t, "c gets web.yaml", hasFile(dirs["c"], "web.yaml", goodService))
	eventually(t, "b reports the conflict", func() (bool, string) {
		c := nw.syncers["b"].Status().Conflicts["web.yaml"]
		return strings.Contains(c, "local file"), c
	})
	if got, _ := os.ReadFile(filepath.Join(dirs["b"], "web.yaml")); string(got) != local {
		t.Errorf("b's own web.yaml was changed to %q", got)
	}
	// The operator removes the local copy: the publication takes its
	// place, and the conflict is over.
	if err := os.Remove(filepath.Join(dirs["b"], "web.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b takes a's web.yaml", hasFile(dirs["b"], "web.yaml", goodService))
	eventually(t, "b's conflict is over", func() (bool, string) {
		c, ok := nw.syncers["b"].Status().Conflicts["web.yaml"]
		return !ok, c
	})
}

// A director cut off while a file is published and removed catches up
// from the digests, tombstones included.
func TestSyncCatchesUpAfterACut(t *testing.T) {
	nw, dirs := startDirectors(t, []string{"a"}, "a", "b", "c")
	write(t, filepath.Join(dirs["a"], "old.yaml"), goodService)
	eventually(t, "c gets old.yaml", hasFile(dirs["c"], "old.yaml", goodService))
	nw.mu.Lock()
	nw.cut["c"] = true
	nw.mu.Unlock()
	other := strings.Replace(strings.Replace(goodService, "web", "api", 1), "192.0.2.10", "192.0.2.11", 1)
	write(t, filepath.Join(dirs["a"], "api.yaml"), other)
	if err := os.Remove(filepath.Join(dirs["a"], "old.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b drops old.yaml", gone(dirs["b"], "old.yaml"))
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Lstat(filepath.Join(dirs["c"], "api.yaml")); err == nil {
		t.Fatal("c got api.yaml while cut off")
	}
	nw.mu.Lock()
	nw.cut["c"] = false
	nw.mu.Unlock()
	eventually(t, "c gets api.yaml", hasFile(dirs["c"], "api.yaml", other))
	eventually(t, "c drops old.yaml", gone(dirs["c"], "old.yaml"))
	eventually(t, "the digests agree", func() (bool, string) {
		a, c := nw.syncers["a"].Status().Digest, nw.syncers["c"].Status().Digest
		return a == c, a + " " + c
	})
}

// Only config sources publish: a receiver's files stay its own.
func TestSyncReceiverDoesNotPublish(t *testing.T) {
	nw, dirs := startDirectors(t, []string{"a"}, "a", "b")
	write(t, filepath.Join(dirs["b"], "mine.yaml"), goodService)
	write(t, filepath.Join(dirs["a"], "web.yaml"), strings.Replace(goodService, "192.0.2.10", "192.0.2.20", 1))
	eventually(t, "b gets web.yaml", hasFile(dirs["b"], "web.yaml", strings.Replace(goodService, "192.0.2.10", "192.0.2.20", 1)))
	if _, err := os.Lstat(filepath.Join(dirs["a"], "mine.yaml")); err == nil {
		t.Error("a got the file of b, which is no source")
	}
	eventually(t, "a keeps its one record", func() (bool, string) {
		n := nw.syncers["a"].Status().Records
		return n == 1, fmt.Sprint(n, " records")
	})
	// The status tells what a director published from what it received.
	eventually(t, "a published it, b received it", func() (bool, string) {
		a, b := nw.syncers["a"].Status(), nw.syncers["b"].Status()
		return a.Published == 1 && b.Records == 1 && b.Published == 0, fmt.Sprintf("a %+v, b %+v", a, b)
	})
}

// Two sources publish the same file: every director keeps the later
// one and says so; the earlier source keeps its own copy in force.
func TestSyncTwoSourcesOneFile(t *testing.T) {
	nw, dirs := startDirectors(t, []string{"a", "b"}, "a", "b", "c")
	first := goodService
	later := strings.Replace(goodService, "10.0.0.11", "10.0.0.12", 1)
	write(t, filepath.Join(dirs["a"], "web.yaml"), first)
	eventually(t, "c gets a's web.yaml", hasFile(dirs["c"], "web.yaml", first))
	write(t, filepath.Join(dirs["b"], "web.yaml"), later) // a later modification time
	eventually(t, "c takes b's later web.yaml", hasFile(dirs["c"], "web.yaml", later))
	eventually(t, "c reports the two publishers", func() (bool, string) {
		c := nw.syncers["c"].Status().Conflicts["web.yaml"]
		return strings.Contains(c, "published by a and by b; b's"), c
	})
	eventually(t, "the digests agree", func() (bool, string) {
		d := map[string]bool{}
		for _, n := range []string{"a", "b", "c"} {
			d[nw.syncers[n].Status().Digest] = true
		}
		return len(d) == 1, fmt.Sprint(d)
	})
	if got, _ := os.ReadFile(filepath.Join(dirs["a"], "web.yaml")); string(got) != first {
		t.Errorf("a's own web.yaml was changed to %q", got)
	}
}
