// Package configsync runs cluster.config_sync on a director: it publishes
// the service files of this director's services directory (when it is one
// of config_sources), takes the other directors' publications from the
// cluster, checks each like a local file and writes the good ones into
// the managed directory, services_dir/.cluster, with a link to each in
// the services directory, where the agent's own loader and watch find
// them. A file the operator put in the services directory is never
// replaced or removed. The wire and the merge rule are
// cluster/configsync's; the cluster node carries the messages.
package configsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/lvsd/lvsd/cluster/configsync"
	"github.com/lvsd/lvsd/cluster/identity"
)

// Transport is what the syncer uses of the cluster node (cluster.Node).
type Transport interface {
	ConfigPeers() []string
	SendConfig(member string, msg []byte) error
	SendConfigPacket(member string, msg []byte) error
}

// Config configures a Syncer.
type Config struct {
	Node      string // this director's node name
	Dir       string // the services directory
	Sources   []string
	Keys      *identity.Keys // signs this director's messages, checks the others'
	Transport Transport
	// LaxModes: strict_modes is off; the check of a received file uses it
	// as the check of a local one does.
	LaxModes bool
	Log      *slog.Logger
	// DigestInterval is how often the digest goes to every peer, and so
	// how soon a director that missed a record pulls it.
	DigestInterval time.Duration
	// ScanInterval is how often the services directory is scanned whatever
	// inotify says (a file that is a link to elsewhere, edited there).
	ScanInterval time.Duration
}

// Defaults of Config.
const (
	DefaultDigestInterval = time.Second
	DefaultScanInterval   = 10 * time.Second
	// settle is how long the directory must be quiet after an event before
	// it is scanned: an editor's truncate-then-write is not published half
	// way.
	settle = 100 * time.Millisecond
	// settleCreate is the wait after a file appeared or went, for a write
	// that follows its creation.
	settleCreate = 10 * time.Millisecond
	// inboxSize bounds the messages waiting for the loop; past it they are
	// dropped (the digests repair what is lost).
	inboxSize = 256
	// sendQueue bounds the messages waiting for one peer.
	sendQueue = 1024
)

// ManagedDir is the directory, inside the services directory, that holds
// what config sync writes. It is hidden, so the loader does not read it as
// service files; the links to it are what the loader reads.
const ManagedDir = ".cluster"

// Syncer is config sync on one director. One goroutine (Run) owns its
// state; DeliverConfig and Status may be called from any.
type Syncer struct {
	cfg       Config
	log       *slog.Logger
	store     *configsync.Store
	publishes bool
	inbox     chan []byte
	local     map[string]localFile // the operator's service files, by name
	senders   map[string]chan []byte
	lastInv   map[string]time.Time // when an inventory last went to each peer
	lastReply map[string]time.Time // when an inventory of each peer was last answered
	ctx       context.Context
	wg        sync.WaitGroup

	// reload asks the agent to read the services directory now, so a
	// received file is in force within a second, not after the agent's
	// own watch has let it settle for a check (SetReload).
	reload    atomic.Pointer[func(context.Context)]
	reloadReq chan struct{}

	mu     sync.Mutex // guards status
	status Status
}

// SetReload gives the syncer the agent's reload request, called (on a
// goroutine of its own, never two at once) after it changed the services
// directory.
func (s *Syncer) SetReload(f func(context.Context)) { s.reload.Store(&f) }

// requestReload asks for a reload; requests while one runs make one more.
func (s *Syncer) requestReload() {
	select {
	case s.reloadReq <- struct{}{}:
	default:
	}
}

func (s *Syncer) reloader(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.reloadReq:
			if f := s.reload.Load(); f != nil {
				(*f)(ctx)
			}
		}
	}
}

// Status is what config sync reports.
type Status struct {
	// Records are the files kept, tombstones included, and Digest their
	// digest: the same on every director once they agree.
	Records int    `json:"records"`
	Digest  string `json:"digest"`
	// Published counts the records this director published; the others
	// came from the other directors.
	Published int `json:"published"`
	// Refused are the received files that failed the check, by name, with
	// the problems found (publisher's file:line:col).
	Refused map[string]string `json:"refused,omitempty"`
	// Conflicts are the files two publishers published, or a received one
	// that a local file of the same name overrides here, by name.
	Conflicts map[string]string `json:"conflicts,omitempty"`
}

// New makes a syncer; Run starts it.
func New(cfg Config) (*Syncer, error) {
	switch {
	case cfg.Node == "" || cfg.Dir == "" || cfg.Transport == nil:
		return nil, errors.New("config sync needs the node name, the services directory and the cluster")
	case !cfg.Keys.Enforced() || !cfg.Keys.Signs():
		return nil, errors.New("config sync needs this director's identity and cluster.directors")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.DigestInterval <= 0 {
		cfg.DigestInterval = DefaultDigestInterval
	}
	if cfg.ScanInterval <= 0 {
		cfg.ScanInterval = DefaultScanInterval
	}
	return &Syncer{cfg: cfg, log: cfg.Log.With("part", "config-sync"), store: configsync.NewStore(cfg.Sources),
		publishes: slices.Contains(cfg.Sources, cfg.Node), inbox: make(chan []byte, inboxSize),
		local: map[string]localFile{}, reloadReq: make(chan struct{}, 1), senders: map[string]chan []byte{}, lastInv: map[string]time.Time{}, lastReply: map[string]time.Time{},
		status: Status{Refused: map[string]string{}, Conflicts: map[string]string{}}}, nil
}

// DeliverConfig implements cluster.ConfigSyncReceiver: it queues msg for
// the loop, or drops it when the loop is that far behind.
func (s *Syncer) DeliverConfig(msg []byte) {
	select {
	case s.inbox <- msg:
	default:
	}
}

// Status returns a copy of the syncer's status.
func (s *Syncer) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Refused, st.Conflicts = cloneMap(st.Refused), cloneMap(st.Conflicts)
	return st
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Run syncs until ctx ends.
func (s *Syncer) Run(ctx context.Context) error {
	s.ctx = ctx
	defer s.wg.Wait()
	if err := s.prepare(); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config sync: %w", err)
	}
	defer w.Close()
	if err := w.Add(s.cfg.Dir); err != nil {
		return fmt.Errorf("config sync: watching %s: %w", s.cfg.Dir, err)
	}
	s.wg.Go(func() { s.reloader(ctx) })
	s.loadKept()
	s.scan()
	s.log.Info("config sync running", "publishes", s.publishes, "sources", s.cfg.Sources, "records", s.store.Len())
	digest := time.NewTicker(s.cfg.DigestInterval)
	defer digest.Stop()
	rescan := time.NewTicker(s.cfg.ScanInterval)
	defer rescan.Stop()
	settled := time.NewTimer(time.Hour)
	settled.Stop()
	writing := false // a write came since the last scan: let it settle
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg := <-s.inbox:
			s.receive(msg)
		case ev := <-w.Events:
			switch {
			case !s.isLocalEvent(ev):
			case ev.Has(fsnotify.Write) || ev.Has(fsnotify.Chmod):
				writing = true
				settled.Reset(settle)
			case !writing:
				// A file renamed into place (as tools that write
				// atomically do), or gone, is complete: publish it
				// unless a write follows at once (created, then
				// written).
				settled.Reset(settleCreate)
			}
		case err := <-w.Errors:
			s.log.Warn("config sync: watching the services directory", "err", err)
			settled.Reset(settle)
		case <-settled.C:
			writing = false
			s.scan()
		case <-rescan.C:
			s.scan()
		case <-digest.C:
			s.sendDigests()
		}
		s.publishStatus()
	}
}

func (s *Syncer) publishStatus() {
	d := s.store.Digest(s.cfg.Node)
	published := 0
	for _, name := range s.store.Names() {
		if s.store.Get(name).Publisher == s.cfg.Node {
			published++
		}
	}
	s.mu.Lock()
	s.status.Records, s.status.Published = s.store.Len(), published
	s.status.Digest = fmt.Sprintf("%x", d.Sum)
	s.mu.Unlock()
}

func (s *Syncer) setRefused(name, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg == "" {
		delete(s.status.Refused, name)
	} else {
		s.status.Refused[name] = msg
	}
}

func (s *Syncer) setConflict(name, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg == "" {
		delete(s.status.Conflicts, name)
	} else {
		s.status.Conflicts[name] = msg
	}
}

// receive handles one message from a peer.
func (s *Syncer) receive(msg []byte) {
	m, err := configsync.Decode(msg, s.cfg.Keys)
	if err != nil {
		s.log.Warn("config sync: refusing a message", "err", err)
		return
	}
	switch {
	case m.Record != nil:
		s.take(m.Record, true)
	case m.Digest != nil:
		if m.Digest.Sender == s.cfg.Node {
			return
		}
		mine := s.store.Digest(s.cfg.Node)
		if mine.Sum == m.Digest.Sum {
			return
		}
		// Only the inventory says who lacks what; one a digest interval
		// per peer is enough, the digests keep coming.
		if time.Since(s.lastInv[m.Digest.Sender]) < s.cfg.DigestInterval {
			return
		}
		s.lastInv[m.Digest.Sender] = time.Now()
		s.send(m.Digest.Sender, configsync.EncodeInventory(s.store.Inventory(s.cfg.Node), s.cfg.Keys))
	case m.Inventory != nil:
		if m.Inventory.Sender == s.cfg.Node {
			return
		}
		// What an inventory makes this director send is bounded by how
		// often it answers one: a peer asks once a digest interval.
		if time.Since(s.lastReply[m.Inventory.Sender]) < s.cfg.DigestInterval/2 {
			return
		}
		s.lastReply[m.Inventory.Sender] = time.Now()
		for _, r := range s.store.Newer(*m.Inventory) {
			s.send(m.Inventory.Sender, r.Wire)
		}
	}
}

// take merges a record into the store, keeps it on disk and applies it to
// the services directory.
func (s *Syncer) take(r *configsync.Record, fromPeer bool) bool {
	out, old, err := s.store.Accept(r)
	if err != nil {
		s.log.Warn("config sync: refusing a record", "file", r.Name, "publisher", r.Publisher, "err", err)
		return false
	}
	if out == configsync.Stale {
		return false
	}
	if out == configsync.Replaced && !r.Deleted && !old.Deleted {
		msg := fmt.Sprintf("published by %s and by %s; %s's, the later (version %d over %d), is kept", old.Publisher, r.Publisher, r.Publisher, r.Version, old.Version)
		s.log.Warn("config sync: two directors published the same file", "file", r.Name, "kept", r.Publisher, "over", old.Publisher)
		s.setConflict(r.Name, msg)
	} else if out == configsync.Kept {
		s.setConflict(r.Name, "")
	}
	if fromPeer {
		s.log.Info("config sync: record received", "file", r.Name, "publisher", r.Publisher, "version", r.Version, "deleted", r.Deleted)
	}
	s.apply(r.Name) // first: a received file is on the way to the kernel while the record is kept
	s.keep(r)
	return true
}

// sendDigests sends this director's digest to every peer.
func (s *Syncer) sendDigests() {
	msg := configsync.EncodeDigest(s.store.Digest(s.cfg.Node), s.cfg.Keys)
	for _, p := range s.cfg.Transport.ConfigPeers() {
		if err := s.cfg.Transport.SendConfigPacket(p, msg); err != nil {
			s.log.Debug("config sync: sending the digest", "to", p, "err", err)
		}
	}
}

// broadcast sends a record to every peer.
func (s *Syncer) broadcast(msg []byte) {
	for _, p := range s.cfg.Transport.ConfigPeers() {
		s.send(p, msg)
	}
}

// send queues msg for peer on its own sender, so that a slow peer holds up
// neither the loop nor the others.
func (s *Syncer) send(peer string, msg []byte) {
	q, ok := s.senders[peer]
	if !ok {
		q = make(chan []byte, sendQueue)
		s.senders[peer] = q
		s.wg.Go(func() { s.sender(peer, q) })
	}
	select {
	case q <- msg:
	default:
		s.log.Debug("config sync: send queue full; the digests will repair it", "to", peer)
	}
}

func (s *Syncer) sender(peer string, q chan []byte) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case msg := <-q:
			if err := s.cfg.Transport.SendConfig(peer, msg); err != nil {
				s.log.Debug("config sync: sending", "to", peer, "err", err)
			}
		}
	}
}
