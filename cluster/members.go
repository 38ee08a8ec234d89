package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/hashicorp/memberlist"
)

// memberlistConfig builds memberlist's configuration. memberlist keeps the
// membership (who is in the cluster, at which address), encrypts and labels
// every packet, and carries the heartbeats as user messages; the failure
// detection that moves VIPs is the heartbeats' (loop.go), so memberlist's
// own probing keeps its conservative LAN timers and never moves a VIP.
func (n *Node) memberlistConfig() *memberlist.Config {
	c := memberlist.DefaultLANConfig()
	c.Name = n.cfg.Name
	host, port, _ := net.SplitHostPort(n.cfg.Bind)
	c.BindAddr = host
	c.BindPort, _ = strconv.Atoi(port)
	c.AdvertisePort = c.BindPort
	if n.cfg.Advertise != "" {
		h, p, _ := net.SplitHostPort(n.cfg.Advertise)
		c.AdvertiseAddr = h
		c.AdvertisePort, _ = strconv.Atoi(p)
	}
	c.Label = n.cfg.Label
	if !n.cfg.Insecure {
		kr, err := memberlist.NewKeyring(n.cfg.Keys, n.cfg.Keys[0])
		if err == nil {
			c.Keyring, n.keyring = kr, kr
		}
	}
	// Heartbeats are tiny: compressing them only costs CPU.
	c.EnableCompression = false
	// A peer that is down (its port cut) must not stall a join for 10 s.
	c.TCPTimeout = 3 * time.Second
	c.Delegate = delegate{n}
	c.Events = events{n}
	c.Logger = log.New(&mlLog{n: n, last: map[string]time.Time{}}, "", 0)
	if n.cfg.Transport != nil {
		c.Transport = n.cfg.Transport
	}
	return c
}

// delegate receives memberlist's user messages: the heartbeats.
type delegate struct{ n *Node }

func (delegate) NodeMeta(int) []byte                 { return nil }
func (delegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (delegate) LocalState(bool) []byte              { return nil }
func (delegate) MergeRemoteState(buf []byte, _ bool) {}

// NotifyMsg runs on memberlist's packet goroutine; it only decodes and
// hands over, dropping when the loop is that far behind (heartbeats repeat).
func (d delegate) NotifyMsg(b []byte) {
	if len(b) > 0 && b[0] == SyncMagic {
		d.n.deliverSync(b)
		return
	}
	if d.n.deliverConfig(b) {
		return
	}
	hb, err := decodeHeartbeat(b)
	if err != nil {
		var v versionError
		if errors.As(err, &v) && time.Since(time.Unix(0, d.n.versionWarned.Load())) > 10*time.Minute {
			d.n.versionWarned.Store(time.Now().UnixNano())
			d.n.log.Warn("dropping heartbeats of an lvsd version this one does not read; upgrade one release at a time", "err", err)
			return
		}
		d.n.log.Debug("dropping a cluster message", "err", err)
		return
	}
	now := time.Now()
	if !d.n.admit(hb, now) {
		return
	}
	select {
	case d.n.heartbeats <- received{hb, now}:
	default:
	}
}

// memberEvent is a change in memberlist's view.
type memberEvent struct {
	name, addr string
	alive      bool
}

// events records memberlist's membership changes for the loop. memberlist
// calls it holding its own locks: no calls back into memberlist here.
type events struct{ n *Node }

func (e events) NotifyJoin(m *memberlist.Node)   { e.push(m, true) }
func (e events) NotifyLeave(m *memberlist.Node)  { e.push(m, false) }
func (e events) NotifyUpdate(m *memberlist.Node) { e.push(m, true) }

func (e events) push(m *memberlist.Node, alive bool) {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	e.n.memberEvs = append(e.n.memberEvs, memberEvent{m.Name, m.Address(), alive})
	e.n.signal()
}

func (s *loopState) onMember(ev memberEvent) {
	if ev.name == s.n.cfg.Name {
		return
	}
	if old, ok := s.members[ev.name]; ok && old == ev {
		return
	}
	s.members[ev.name] = ev
	alive := 0
	for _, m := range s.members {
		if m.alive {
			alive++
		}
	}
	if ev.alive {
		s.n.log.Info("member joined", "member", ev.name, "address", ev.addr, "members", alive+1)
	} else {
		s.n.log.Info("member left or failed", "member", ev.name, "address", ev.addr, "members", alive+1)
	}
}

// rejoinLoop joins the configured peers at start, every RejoinInterval
// and when a heartbeat comes from a director memberlist does not count:
// memberlist alone does not merge two halves of a healed partition.
func (n *Node) rejoinLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.RejoinInterval)
	defer t.Stop()
	var extra []string
	for {
		n.rejoin(ctx, extra)
		extra = nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case a := <-n.joinReq:
			extra = append(extra, a)
		}
	}
}

func (n *Node) rejoin(ctx context.Context, extra []string) {
	resolved := n.resolvePeers()
	// The members as the loop knows them from memberlist's events: the
	// nodes memberlist.Members returns are its own, which it updates
	// without a lock at every alive message (a data race).
	members := map[string]bool{}
	if err := n.do(ctx, func() {
		for _, m := range n.st.members {
			if m.alive {
				members[m.addr] = true
			}
		}
	}); err != nil {
		return
	}
	var todo []string
	for _, a := range append(resolved, extra...) {
		if !members[a] && !n.self[a] && !slices.Contains(todo, a) {
			todo = append(todo, a)
		}
	}
	if len(todo) == 0 {
		return
	}
	k, err := n.ml.Join(todo)
	if k > 0 {
		n.log.Debug("joined peers", "contacted", k, "of", len(todo))
	}
	if err == nil {
		return
	}
	msg := err.Error()
	hint := authHint(msg)
	n.mu.Lock()
	repeat := n.lastJoinErr == hint+msg
	n.lastJoinErr = hint + msg
	n.mu.Unlock()
	switch {
	case hint != "" && !repeat:
		n.log.Error("cannot join the cluster: "+hint, "peers", strings.Join(todo, ","), "err", msg)
	case hint == "":
		n.log.Debug("peers not reachable", "peers", strings.Join(todo, ","), "err", msg)
	}
}

// resolvePeers turns the configured peers into IP:port strings (names
// are looked up again each time: addresses may change), without this node.
func (n *Node) resolvePeers() []string {
	var out []string
	for _, p := range n.cfg.Peers {
		host, port, err := net.SplitHostPort(p)
		if err != nil {
			continue
		}
		ips := []string{host}
		if net.ParseIP(host) == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ips, err = net.DefaultResolver.LookupHost(ctx, host)
			cancel()
			if err != nil {
				n.log.Debug("resolving peer", "peer", p, "err", err)
				continue
			}
		}
		for _, ip := range ips {
			a := net.JoinHostPort(net.ParseIP(ip).String(), port)
			if !n.self[a] && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	n.mu.Lock()
	n.peerAddrs = out
	n.mu.Unlock()
	return out
}

// authHint explains memberlist errors that mean the peers speak another
// key or label, the usual reasons a director cannot join.
func authHint(msg string) string {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "decrypt"), strings.Contains(m, "remote state is encrypted"),
		strings.Contains(m, "encryption is configured but remote state is not encrypted"):
		return "the other directors use another key (compare key_file, insecure)"
	case strings.Contains(m, `unacceptable label ""`), strings.Contains(m, "remove the stream label header"):
		// No label at all: a director without cluster.label, or not a
		// director (junk sent to the port).
		return "a sender without this cluster's label: a director without cluster.label, or not a director at all (cluster.allow_from limits who may send)"
	case strings.Contains(m, "label"):
		return "the other directors use another cluster label"
	}
	return ""
}

// mlLog turns memberlist's log lines ("[WARN] memberlist: ...") into slog
// records. Authentication failures become one explained error per sender
// and 30 s instead of one line per packet; other repeated lines are
// limited to one per 10 s.
type mlLog struct {
	n    *Node
	mu   sync.Mutex // guards last and auth
	last map[string]time.Time
	auth authLog
}

// authLogInterval is how often at most the authentication failures are
// logged: a stranger flooding the cluster port from spoofed sources must
// not flood the log as well.
const authLogInterval = time.Minute

// maxAuthSources bounds the distinct senders an authentication-failure
// line counts; past it the line says "at least".
const maxAuthSources = 1024

// authLog sums up the authentication failures between two log lines.
type authLog struct {
	logged     time.Time
	suppressed uint64
	sources    map[string]bool // since the last line, up to maxAuthSources
}

// failure counts one authentication failure from from at now and says
// whether to log it, with how many were not logged since the last line
// and from how many senders (more if overflow).
func (a *authLog) failure(from string, now time.Time) (log bool, suppressed uint64, sources int, overflow bool) {
	if a.sources == nil {
		a.sources = map[string]bool{}
	}
	if len(a.sources) < maxAuthSources {
		a.sources[from] = true
	} else if !a.sources[from] {
		overflow = true
	}
	if !a.logged.IsZero() && now.Sub(a.logged) < authLogInterval {
		a.suppressed++
		return false, 0, 0, false
	}
	suppressed, sources = a.suppressed, len(a.sources)
	overflow = overflow || sources >= maxAuthSources
	a.logged, a.suppressed = now, 0
	clear(a.sources)
	return true, suppressed, sources, overflow
}

func (w *mlLog) Write(p []byte) (int, error) {
	level, msg, from := parseMemberlistLine(string(p))
	log := w.n.log
	if hint := authHint(msg); hint != "" {
		w.n.port.refusedPackets.Add(1)
		w.mu.Lock()
		ok, suppressed, sources, overflow := w.auth.failure(from, time.Now())
		w.mu.Unlock()
		if ok {
			args := []any{"from", from, "err", msg}
			if suppressed > 0 {
				n := strconv.Itoa(sources)
				if overflow {
					n = "at least " + n
				}
				args = append(args, "suppressed", suppressed, "sources", n, "interval", authLogInterval.String())
			}
			log.Error("dropping cluster messages that fail authentication: "+hint, args...)
		}
		return len(p), nil
	}
	if level == "ERR" && isProbeFailure(msg) {
		level = "WARN"
	}
	switch level {
	case "DEBUG":
		log.Debug("memberlist: " + msg)
	case "INFO":
		log.Info("memberlist: " + msg)
	default:
		// Keyed without the sender: a line naming each of many spoofed
		// senders is still one line per 10 s.
		key := msg
		if i := strings.LastIndex(key, "from="); i >= 0 {
			key = key[:i]
		}
		if w.allow(key, 10*time.Second) {
			if level == "WARN" {
				log.Warn("memberlist: " + msg)
			} else {
				log.Error("memberlist: " + msg)
			}
		}
	}
	return len(p), nil
}

// probeFailures begin memberlist's errors of a probe, an ack or a gossip
// message that could not be sent, or not answered in time; transientErrors
// are in those of an exchange with a peer that timed out or found no one
// listening (a push-pull with a peer that is restarting or starved). They
// come and go with a busy host or a lossy network, and what they may lead
// to, a director suspected and then failed, the cluster's view logs
// itself: as errors they would page an operator for each one of a starved
// host.
var (
	probeFailures = []string{"Failed fallback TCP ping", "Failed to send UDP ping", "Failed to send UDP compound ping",
		"Failed to send indirect UDP ping", "Failed to send indirect ping", "Failed to send gossip", "Failed to send ack",
		"Failed to forward ack", "Failed to send nack"}
	transientErrors = []string{"i/o timeout", "connection refused"}
)

func isProbeFailure(msg string) bool {
	return slices.ContainsFunc(probeFailures, func(p string) bool { return strings.HasPrefix(msg, p) }) ||
		slices.ContainsFunc(transientErrors, func(e string) bool { return strings.Contains(msg, e) })
}

// parseMemberlistLine splits one of memberlist's log lines into its level
// (INFO when the line has none), its message without the "memberlist: "
// prefix, and the sender named by the last "from=", empty when the line
// names none. The message quotes what remote peers sent (an error reply, a
// node name), so any text must parse, since a panic here would repeat on
// every such packet; and memberlist appends the address it saw last, so a
// "from=" inside the quoted text cannot stand in for it.
func parseMemberlistLine(line string) (level, msg, from string) {
	line = strings.TrimSpace(line)
	level, msg = "INFO", line
	if strings.HasPrefix(line, "[") {
		if i := strings.IndexByte(line, ']'); i > 0 {
			level, msg = line[1:i], strings.TrimSpace(line[i+1:])
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	if i := strings.LastIndex(msg, "from="); i >= 0 {
		from = msg[i+len("from="):]
		if end := strings.IndexFunc(from, unicode.IsSpace); end >= 0 {
			from = from[:end]
		}
	}
	return level, msg, from
}

func (w *mlLog) allow(key string, every time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if now.Sub(w.last[key]) < every {
		return false
	}
	if len(w.last) > 1000 {
		clear(w.last)
	}
	w.last[key] = now
	return true
}

var _ io.Writer = (*mlLog)(nil)

// keyWatch re-reads the key file when it changes and installs the new keys:
// new ones first, then the new primary, then the removal of the old ones,
// so rotating needs no restart (docs/cluster.md, key rotation).
type keyWatch struct {
	n    *Node
	stat string
}

func newKeyWatch(n *Node) *keyWatch {
	w := &keyWatch{n: n}
	w.stat = w.fingerprint()
	return w
}

func (w *keyWatch) fingerprint() string {
	if w.n.cfg.KeyFile == "" {
		return ""
	}
	fi, err := os.Stat(w.n.cfg.KeyFile)
	if err != nil {
		return "error " + err.Error()
	}
	return fi.ModTime().String() + " " + strconv.FormatInt(fi.Size(), 10)
}

func (w *keyWatch) check() {
	n := w.n
	if n.cfg.KeyFile == "" || n.cfg.LoadKeys == nil || n.cfg.Insecure {
		return
	}
	fp := w.fingerprint()
	if fp == w.stat {
		return
	}
	w.stat = fp
	keys, err := n.cfg.LoadKeys()
	if err != nil {
		n.log.Error("cluster key file changed but cannot be used; keeping the keys in use", "key_file", n.cfg.KeyFile, "err", err)
		return
	}
	kr := n.keyring
	if kr == nil {
		return
	}
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			n.log.Error("installing a cluster key", "err", err)
			return
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		n.log.Error("switching the primary cluster key", "err", err)
		return
	}
	for _, old := range kr.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, old) }) {
			_ = kr.RemoveKey(old)
		}
	}
	n.log.Info("cluster keys reloaded", "key_file", n.cfg.KeyFile, "keys", len(keys))
}
