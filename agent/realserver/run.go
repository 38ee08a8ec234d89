package realserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/metrics"
	"github.com/lvsd/lvsd/agent/sdnotify"
)

// RunOptions are what a real server runs with (`lvsd run` for role
// realserver). Config, Host and Log are required.
type RunOptions struct {
	ConfigPath string
	Config     *config.Agent // already loaded from ConfigPath
	Version    string
	Log        *slog.Logger
	// Host is the real host (arp.Kernel, arp.ProcSys, arp.KernelTunnels,
	// nat.NewKernel()).
	Host Host
	// Notifier speaks sd_notify; nil: no service manager.
	Notifier sdnotify.Notifier
	// Reload delivers a value for every reload request: SIGHUP, which
	// cmd/lvsd subscribes to with signal.Notify.
	Reload <-chan os.Signal
}

// Run opens the sockets the agent file names (the local API, the
// read-only API, the weight endpoint, /metrics) and runs the real-server
// agent on them until ctx ends, telling the service manager it is ready
// and alive while the API answers. A socket that cannot be opened is an
// error before anything changes on the host. Run returns once every
// goroutine it started has stopped.
func Run(ctx context.Context, o RunOptions) error {
	a := o.Config
	log := o.Log.With("role", "realserver")
	apiL, err := api.Listen(a.APISocket)
	if err != nil {
		return fmt.Errorf("api socket: %w", err)
	}
	var readOnlyL net.Listener
	if ro := a.ReadOnlyAPI; ro != nil {
		if readOnlyL, err = api.ListenGroup(ro.Socket, ro.GID); err != nil {
			apiL.Close()
			return fmt.Errorf("read-only api socket: %w", err)
		}
	}
	var healthL net.Listener
	if addr := a.RealServer.Health.Listen; addr != "" {
		if healthL, err = net.Listen("tcp", addr); err != nil {
			apiL.Close()
			if readOnlyL != nil {
				readOnlyL.Close()
			}
			return fmt.Errorf("realserver.health.listen: %w", err)
		}
	}
	ag := New(Options{ConfigPath: o.ConfigPath, Config: a, Host: o.Host, Log: log,
		Metrics: metrics.Listen(a.MetricsListen, log), Version: o.Version, ReadOnlyAPI: readOnlyL})

	notifyCtx, stopNotify := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopNotify(); wg.Wait() }()
	if o.Notifier != nil {
		wg.Go(func() { sdnotify.Run(notifyCtx, log, o.Notifier, sdnotify.SocketLiveness(a.APISocket)) })
	}
	return ag.Run(ctx, o.Reload, apiL, healthL)
}
