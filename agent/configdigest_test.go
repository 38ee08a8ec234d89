package agent

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lvsd/lvsd/cluster"
)

// recordedAdvertiser keeps what the agent advertised, as a cluster node
// would.
type recordedAdvertiser struct{ got []*cluster.ConfigDigest }

func (r *recordedAdvertiser) AdvertiseConfig(d *cluster.ConfigDigest) { r.got = append(r.got, d) }

// Two directors of a cluster with the same files advertise the same
// digest; a backend added on one is named as the difference in both
// views; a reload that changes nothing advertises nothing; the digests of
// a reload of one file equal those of a full load.
func TestAgentAdvertisesConfig(t *testing.T) {
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ActiveStandby, Quorum: 1})
	d1, d2 := newClusterDirector(t, f, "d1", 200), newClusterDirector(t, f, "d2", 100)
	for _, d := range []*clusterDirector{d1, d2} {
		d.env.service("api", "service: api\nvip: 10.0.0.51\nports: [80]\nbackends:\n  - {address: 10.0.0.21}\n")
		d.agent.opts.ConfigDigest = d.node
		d.env.reload(d.agent)
	}
	v, _ := d1.node.View(t.Context())
	if c := v.Members[1].Config; c == nil || c.Match != cluster.ConfigSame || v.ConfigServices != 2 {
		t.Fatalf("same files: %+v, %d services", c, v.ConfigServices)
	}

	d2.env.service("web", webTwo+"  - {address: 10.0.0.13}\n")
	d2.agent.reload("file change", []string{filepath.Join(d2.env.dir, "services.d", "web.yaml")})
	want := &cluster.ConfigView{Match: cluster.ConfigDifferent, Services: []string{"web"}, Differing: 1, Compared: true}
	for _, d := range []*clusterDirector{d1, d2} {
		v, _ := d.node.View(t.Context())
		if c := v.Members[1].Config; !reflect.DeepEqual(c, want) {
			t.Fatalf("%s: %+v, want %+v", v.Node, c, want)
		}
	}
	partial := d2.agent.cfg.digests
	full, err := LoadConfig(d2.agent.opts.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(partial, full.digests) {
		t.Fatalf("digests after a reload of one file %v, after a full load %v", partial, full.digests)
	}

	rec := &recordedAdvertiser{}
	d1.agent.opts.ConfigDigest = rec
	d1.agent.reload("scan", []string{filepath.Join(d1.env.dir, "services.d", "web.yaml")})
	if len(rec.got) != 0 {
		t.Fatalf("a reload that changed nothing advertised %d times", len(rec.got))
	}
}
