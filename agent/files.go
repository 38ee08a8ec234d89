package agent

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/config/servicesdir"
)

// How the agent follows its configuration files: inotify where it can
// (watch.go), a scan of their stamps where it cannot and every Resync as a
// safety net, and a reload of what changed.

// watchConfig watches the configuration files, or returns nil when it
// cannot: the agent then scans them every Check.
func (a *Agent) watchConfig() *configWatch {
	if !a.cfg.Agent.WatchFiles {
		return nil // nor scanned: checkFiles does nothing
	}
	if a.onRemoteFS(filepath.Dir(a.opts.ConfigPath), a.cfg.Agent.ServicesDir) {
		return nil
	}
	w, err := newConfigWatch(a.opts.ConfigPath, a.cfg.Agent.ServicesDir)
	if err != nil {
		a.log.Warn("cannot watch the configuration files; scanning them every check interval instead",
			"err", err, "check", a.opts.Check.String())
		return nil
	}
	w.writes(a.cfg.Agent)
	return w
}

// onRemoteFS reports, and logs, whether one of paths is on a file system
// whose edits inotify may miss (remoteFS).
func (a *Agent) onRemoteFS(paths ...string) bool {
	p, fs := remoteFS(paths...)
	if fs != "" {
		a.log.Info("configuration on a "+fs+" file system, where inotify may miss edits; scanning the files every check interval",
			"path", p, "check", a.opts.Check.String())
	}
	return fs != ""
}

// stopWatching falls back to scanning the files every Check: the watch
// cannot follow the services directory, or its channels closed under it
// (a closed channel would be picked forever).
func (a *Agent) stopWatching(why string, err error) {
	a.log.Warn(why+"; scanning the files every check interval instead", "err", err)
	a.watch.close()
	a.watch = nil
}

// checkFiles reloads the configuration files that changed, unless the
// agent file says reload.watch: false: those the watch names, and what a
// scan of every file finds, every Resync with a watch (the safety net for
// what inotify cannot see) and every Check without one — or less often
// when the scan itself would cost more than scanShare of the time between
// scans (scanInterval). A file is reloaded once it stayed the same for a
// whole period: an editor's truncate-then-write must not be read half way
// (an empty file is a valid file with no services).
func (a *Agent) checkFiles() {
	if !a.cfg.Agent.WatchFiles {
		return // reload.watch: false, only a reload request reads the files
	}
	every, share := time.Duration(0), scanShare // each Check
	if a.watch != nil {
		if paths, rescan, ok := a.watch.take(); ok {
			if rescan {
				paths = nil
			}
			a.reload(triggerScan, paths)
		}
		every, share = a.opts.Resync, watchedScanShare
	}
	start := a.opts.Now()
	if start.Before(a.nextScan) {
		return
	}
	fp := a.configFingerprint()
	// Due half a tick early: the next tick may be handled sooner after it
	// fires than this one was, and must not skip a due scan (a scan every
	// other tick delayed a settled edit by up to two checks more).
	cost := a.scanCosts.add(a.opts.Now().Sub(start))
	a.nextScan = start.Add(scanInterval(every, cost, share) - a.opts.Check/2)
	settled := fp == a.scanned
	a.scanned = fp
	if fp != a.fingerprint && settled {
		a.reload(triggerScan, nil)
	}
}

// scanShare bounds what the scan of every configuration file may cost: a
// stat per file was 95 % of an idle director's CPU at 10,000 files under
// emulation (1.8 s per scan, every Resync); natively such a scan takes
// tens of milliseconds and keeps its period.
const scanShare = 0.01

// watchedScanShare bounds it where inotify reports the edits and the scan
// is only the safety net: the scan of 10,000 files took 1.8 s under
// emulation, and at scanShare it could spend 1 % of a core by itself,
// where an idle director of 10,000 services is to spend 1 % in all (it
// was measured at 1.76 %, one of 1,000 at 0.95 %). A watch that loses
// events says so (an overflow), and every file is compared then.
const watchedScanShare = 0.0025

// triggerScan is the reload trigger of an edit the file watch or scan
// found; a scan that finds files touched but none changed logs quietly.
const triggerScan = "file change"

// scanCosts remembers what the last scans took. Their least is what a scan
// costs: one that was descheduled (a loaded host, a garbage collection)
// took longer than the stats did, and must not put the next scans so far
// off that an edit waits for seconds (a 60 ms scan on 9p meant 6 s).
type scanCosts struct {
	last [4]time.Duration
	n    int
}

// add records a scan that took d and returns the least of the last ones.
func (c *scanCosts) add(d time.Duration) time.Duration {
	c.last[c.n%len(c.last)] = d
	c.n++
	return slices.Min(c.last[:min(c.n, len(c.last))])
}

// minSpacedScan is the least scan cost that spaces scans out: a handful of
// files on a network file system take tens of milliseconds to stat, in
// waiting rather than CPU, and an edit must not wait twice as long for it
// (TestHotReload saw 7.4 s on 9p, where a 30 ms scan meant 3 s between
// scans and two scans settle an edit).
const minSpacedScan = 100 * time.Millisecond

// scanInterval is the time from one scan to the next: every, or longer
// when a scan that took cost (at least minSpacedScan) would spend more
// than share of it.
func scanInterval(every, cost time.Duration, share float64) time.Duration {
	if cost < minSpacedScan {
		return every
	}
	return max(every, time.Duration(float64(cost)/share))
}

// reload reads the configuration again: the files in changed, or every
// file when changed is nil. It returns how many services changed, the
// changed keys that need a restart, and why the configuration was
// rejected (then the last good one stays).
func (a *Agent) reload(why string, changed []string) (changedN int, restart []string, err error) {
	start := time.Now()
	var agentFile servicesdir.Fingerprint
	if changed == nil {
		a.loading()
		agentFile = a.loader.cache.FileFingerprint(a.opts.ConfigPath) // before it is read
	}
	base := a.latestConfig() // a held change is read on from, not dropped
	cfg, ch, err := a.loader.Reload(base, changed)
	if changed == nil {
		// Remember the files' fingerprint, from the stats of this load, so a
		// broken file's error is logged once, not at every scan, and the scan
		// does not reload what this did.
		a.fingerprint = a.loadedFingerprint(agentFile, cfg)
	}
	if err == nil && base != nil {
		restart, err = reloadRules(base.Agent, cfg.Agent)
	}
	a.loadedConfig(a.opts.Now(), err)
	if err != nil {
		a.log.Error("configuration rejected; keeping the last good one", "trigger", why, "err", err)
		return 0, nil, err
	}
	if len(restart) > 0 {
		// What uses these was built at start: a socket, the BGP speaker, the
		// cluster node and relay. The kernel side of the cluster (sync
		// daemons, sysctls, nftables) follows the new values now.
		a.log.Warn("changed keys take effect after a restart (systemctl restart lvsd); the rest of the reload is applied",
			"keys", strings.Join(restart, ","), "trigger", why)
	}
	a.takeLoaded(cfg, ch)
	if a.watch != nil && !cfg.Agent.WatchFiles {
		a.log.Info("reload.watch is false: file edits wait for a reload request (SIGHUP, systemctl reload)")
		a.watch.close()
		a.watch = nil
	}
	if a.watch != nil && cfg.Agent.ServicesDir != "" && filepath.Clean(cfg.Agent.ServicesDir) != a.watch.dir &&
		a.onRemoteFS(cfg.Agent.ServicesDir) {
		a.watch.close() // the new services directory is not for inotify
		a.watch = nil
	}
	if a.watch != nil {
		a.watch.writes(cfg.Agent)
		if err := a.watch.follow(cfg.Agent.ServicesDir); err != nil {
			a.stopWatching("cannot watch the services directory", err)
		}
	}
	changedN = len(ch.Services)
	if ch.All {
		changedN = len(cfg.Services)
	}
	level := slog.LevelInfo
	if changedN == 0 && why == triggerScan {
		level = slog.LevelDebug // a scan found files touched, not changed
	}
	a.log.Log(context.Background(), level, "configuration reloaded", "trigger", why, "services", len(cfg.Services),
		"ipvs_services", len(cfg.Desired.Services), "changed", changedN, "duration", time.Since(start).String())
	return changedN, restart, nil
}

// configFingerprint hashes the stamps (size, times, inode) of the agent
// file and the service files, cheaply detecting edits. It stats through
// the loader's cache, whose calls tests count.
func (a *Agent) configFingerprint() [32]byte {
	var dir servicesdir.Fingerprint
	if a.cfg != nil && a.cfg.Agent.ServicesDir != "" {
		dir = a.loader.cache.DirFingerprint(a.cfg.Agent.ServicesDir)
	}
	return joinFingerprints(a.loader.cache.FileFingerprint(a.opts.ConfigPath), dir)
}

// loadedFingerprint is configFingerprint after a full load into cfg (nil:
// it failed), from the agent file's stamp taken before and the stats the
// load made of the service files, when it got that far: one stat per file.
func (a *Agent) loadedFingerprint(agentFile servicesdir.Fingerprint, cfg *LoadedConfig) [32]byte {
	if cfg == nil {
		cfg = a.cfg
	}
	if cfg == nil || cfg.Agent.ServicesDir == "" {
		return joinFingerprints(agentFile, servicesdir.Fingerprint{})
	}
	dir, ok := a.loader.cache.Scanned(cfg.Agent.ServicesDir)
	if !ok {
		dir = a.loader.cache.DirFingerprint(cfg.Agent.ServicesDir)
	}
	return joinFingerprints(agentFile, dir)
}

func joinFingerprints(agentFile, dir servicesdir.Fingerprint) [32]byte {
	return sha256.Sum256(append(agentFile[:], dir[:]...))
}
