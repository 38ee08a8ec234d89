package nat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"github.com/lvsd/lvsd/nat/rules"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Kernel applies rulesets to the kernel's nftables with
// github.com/google/nftables, in the current network namespace unless
// InNetNS says otherwise.
//
// Apply compares digests before writing: the digest of the applied ruleset
// is kept in the comment of each table's "vips" set, so an unchanged ruleset
// costs two small netlink reads and no write, also right after an agent
// restart, and a table deleted by someone else is noticed and rewritten.
// Comparing the rules themselves (read back and compared expression by
// expression) would also notice hand edits inside lvsd's tables, but
// google/nftables v0.3.0 does not decode every expression faithfully (ct
// with a source register, for one), so that comparison would be fragile.
type Kernel struct {
	netns int // netns fd; -1: the caller's
}

// nftMu serialises the calls of all Kernels: one batch at a time, and
// google/nftables allocates set IDs from an unguarded package variable.
var nftMu sync.Mutex

var _ Interface = (*Kernel)(nil)

// KernelOption configures a Kernel.
type KernelOption func(*Kernel)

// InNetNS makes the Kernel program the network namespace open as fd. The
// caller keeps fd open while the Kernel is in use.
func InNetNS(fd int) KernelOption {
	return func(k *Kernel) { k.netns = fd }
}

// NewKernel returns a Kernel. It opens nothing: every call dials its own
// netlink socket.
func NewKernel(opts ...KernelOption) *Kernel {
	k := &Kernel{netns: -1}
	for _, o := range opts {
		o(k)
	}
	return k
}

// conn dials a netlink socket for one call. Not sharing a connection between
// calls is deliberate: a google/nftables Conn keeps the first serialisation
// error forever, and a batch that fails half-way can leave unread acks on a
// lasting socket that the next call would take for its own.
func (k *Kernel) conn() (*nftables.Conn, error) {
	opts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(batchBuffers)}
	if k.netns >= 0 {
		opts = append(opts, nftables.WithNetNSFd(k.netns))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("opening nftables netlink socket: %w", classify(err))
	}
	return c, nil
}

// batchSocketBuffer bounds one ruleset batch and its acknowledgements. The
// kernel refuses a netlink message larger than the socket's send buffer
// (EMSGSIZE; the default, net.core.wmem_default, is 208 KiB: about 400
// FULLNAT services), and drops acknowledgements beyond its receive buffer
// (ENOBUFS). 10,000 FULLNAT services make a batch of about 5 MB and 20,000
// acknowledgements. The buffers are limits, not allocations.
const batchSocketBuffer = 256 << 20

// batchBuffers raises the socket's buffers to batchSocketBuffer, past
// net.core.wmem_max and rmem_max with the FORCE options (CAP_NET_ADMIN,
// which writing nftables needs anyway); without the capability it keeps
// what the plain options give.
func batchBuffers(c *netlink.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var sockErr error
	err = raw.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}, {unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], batchSocketBuffer) != nil {
				if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], batchSocketBuffer); err != nil {
					sockErr = err
				}
			}
		}
	})
	return errors.Join(err, sockErr)
}

// Apply implements Interface: one batch that, per family, adds the table
// (a no-op if it exists), deletes it and adds it again with its content. A
// bare delete of a missing table would fail the whole batch.
func (k *Kernel) Apply(ctx context.Context, rs Ruleset) error {
	if rs.Tables() == nil {
		return errZeroRuleset
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	nftMu.Lock()
	defer nftMu.Unlock()
	if d, err := k.installed(); err != nil {
		return err
	} else if d == rs.Digest() {
		return nil
	}
	c, err := k.conn()
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	for _, t := range rs.Tables() {
		tbl := &nftables.Table{Name: TableName, Family: nfFamily(t.Family)}
		c.AddTable(tbl)
		c.DelTable(tbl)
		c.AddTable(tbl)
		if err := (batch{c: c, tbl: tbl, fam: t.Family}).fill(t, rs.Digest()); err != nil {
			return fmt.Errorf("building nftables batch: %w", err)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("replacing tables ip/ip6 %s (ruleset %s): %w", TableName, rs.Digest(), classify(err))
	}
	return nil
}

// Installed implements Interface.
func (k *Kernel) Installed(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	nftMu.Lock()
	defer nftMu.Unlock()
	return k.installed()
}

// installed reads the digest from the comment of both tables' vips set;
// "" unless both exist and agree. google/nftables v0.3.0 writes set comments
// but does not decode them (setsFromMsg skips the comment in
// NFTA_SET_USERDATA), so this asks the kernel itself: two GETSET requests.
func (k *Kernel) installed() (string, error) {
	cfg := &netlink.Config{}
	if k.netns >= 0 {
		cfg.NetNS = k.netns
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return "", fmt.Errorf("opening nftables netlink socket: %w", classify(err))
	}
	defer c.Close()
	var digest string
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		comment, err := setComment(c, fam)
		if errors.Is(err, unix.ENOENT) {
			return "", nil // table or set missing
		}
		if err != nil {
			return "", fmt.Errorf("reading set %s in table %s %s: %w", rules.VIPSet, fam.NFTName(), TableName, classify(err))
		}
		d, ok := strings.CutPrefix(comment, rules.CommentPrefix)
		if !ok || d == "" || (digest != "" && d != digest) {
			return "", nil
		}
		digest = d
	}
	return digest, nil
}

func setComment(c *netlink.Conn, fam rules.Family) (string, error) {
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_SET_TABLE, Data: []byte(TableName + "\x00")},
		{Type: unix.NFTA_SET_NAME, Data: []byte(rules.VIPSet + "\x00")},
	})
	if err != nil {
		return "", err
	}
	// nfgenmsg: family, version, resource id.
	hdr := []byte{byte(nfFamily(fam)), unix.NFNETLINK_V0, 0, 0}
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{
			Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETSET),
			// No Acknowledge: the reply (or an error) is the answer, and an
			// extra ack would be left unread for the next request.
			Flags: netlink.Request,
		},
		Data: append(hdr, attrs...),
	})
	if err != nil {
		return "", err
	}
	for _, m := range msgs {
		if len(m.Data) < len(hdr) {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[len(hdr):])
		if err != nil {
			return "", err
		}
		for ad.Next() {
			if ad.Type() == unix.NFTA_SET_USERDATA {
				if s, ok := userdata.GetString(ad.Bytes(), userdata.NFTNL_UDATA_SET_COMMENT); ok {
					return s, nil
				}
			}
		}
		if err := ad.Err(); err != nil {
			return "", err
		}
	}
	return "", nil
}

// Remove implements Interface.
func (k *Kernel) Remove(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	nftMu.Lock()
	defer nftMu.Unlock()
	c, err := k.conn()
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		tbl := &nftables.Table{Name: TableName, Family: nfFamily(fam)}
		c.AddTable(tbl) // so that the delete cannot fail on a missing table
		c.DelTable(tbl)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("deleting tables ip/ip6 %s: %w", TableName, classify(err))
	}
	return nil
}

func nfFamily(f rules.Family) nftables.TableFamily {
	if f == rules.IPv4 {
		return nftables.TableFamilyIPv4
	}
	return nftables.TableFamilyIPv6
}

// classify wraps the errors that mean "this host cannot do it" in
// ErrNotSupported with a hint, and leaves the others alone.
func classify(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %w (needs CAP_NET_ADMIN)", ErrNotSupported, err)
	case errors.Is(err, unix.EPROTONOSUPPORT), errors.Is(err, unix.EAFNOSUPPORT):
		return fmt.Errorf("%w: %w (kernel without nf_tables)", ErrNotSupported, err)
	case errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: %w (kernel module missing? nft_chain_nat, nft_nat, nft_ct)", ErrNotSupported, err)
	case errors.Is(err, unix.ENOENT):
		// A batch gets ENOENT for an unknown chain type or expression (no
		// module) as well as for a reference to a missing object.
		return fmt.Errorf("%w (a kernel module missing, e.g. nft_chain_nat, nft_nat, nft_ct?)", err)
	}
	return err
}
