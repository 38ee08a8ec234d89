package director

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/configsync"
	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/identity"
)

// configSyncNode is what config sync uses of the cluster node
// (cluster.Node): the fakes of the director's tests carry none.
type configSyncNode interface {
	configsync.Transport
	SetConfigSync(cluster.ConfigSyncReceiver)
}

var errNoConfigSync = errors.New("cluster.config_sync: this cluster node carries no configuration sync")

// startConfigSync runs cluster.config_sync (docs/cluster.md,
// "Configuration sync") on runs until ctx ends.
func startConfigSync(ctx context.Context, a *config.Agent, node Node, keys *identity.Keys, runs *sync.WaitGroup, log *slog.Logger) (*configsync.Syncer, error) {
	cs, ok := node.(configSyncNode)
	if !ok {
		return nil, errNoConfigSync
	}
	s, err := configsync.New(configsync.Config{Node: a.Node, Dir: a.ServicesDir, Sources: a.Cluster.ConfigSources,
		Keys: keys, Transport: cs, LaxModes: a.LaxModes, Log: log})
	if err != nil {
		return nil, err
	}
	cs.SetConfigSync(s)
	runs.Go(func() {
		if err := s.Run(ctx); err != nil {
			log.Error("config sync stopped; this director's services directory is neither published nor updated", "err", err)
		}
	})
	return s, nil
}

// RouteConfigSync answers config sync's status (GET): the records kept,
// their digest, the files refused and the conflicts.
const RouteConfigSync = "/v1/config-sync"

// ConfigSyncStatus is RouteConfigSync's answer.
type ConfigSyncStatus struct {
	Schema int    `json:"schema"`
	Node   string `json:"node"`
	configsync.Status
}

// serveConfigSync adds RouteConfigSync to the local API when config sync
// runs.
func serveConfigSync(h http.Handler, s *configsync.Syncer, node string) http.Handler {
	if s == nil {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET "+RouteConfigSync, func(w http.ResponseWriter, _ *http.Request) {
		api.WriteJSON(w, ConfigSyncStatus{Schema: api.SchemaVersion, Node: node, Status: s.Status()})
	})
	return mux
}

// configSyncView reports s's status to the views.
func configSyncView(s *configsync.Syncer) func() views.ConfigSyncStatus {
	return func() views.ConfigSyncStatus {
		st := s.Status()
		return views.ConfigSyncStatus{Records: st.Records, Published: st.Published, Digest: st.Digest,
			Refused: st.Refused, Conflicts: st.Conflicts}
	}
}
