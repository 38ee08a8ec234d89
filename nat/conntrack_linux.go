package nat

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

var _ ConntrackRestorer = (*Kernel)(nil)

// restoreChunk is how many requests go out in one sendmsg before the
// answers are read: few syscalls for thousands of entries, and few enough
// error answers (a datagram each, echoing its request: all of a chunk of
// existing entries) never to fill the socket's receive buffer (ENOBUFS).
const restoreChunk = 64

// statusNoConfirmed remembers that this kernel refused restoredStatus with
// EBUSY and wants the status without IPS_CONFIRMED (see restoredStatus).
var statusNoConfirmed atomic.Bool

// RestoreConntrack implements ConntrackRestorer through ctnetlink, in the
// Kernel's network namespace.
func (k *Kernel) RestoreConntrack(ctx context.Context, entries []ConntrackEntry) (RestoreResult, error) {
	var res RestoreResult
	if len(entries) == 0 {
		return res, ctx.Err()
	}
	cfg := &netlink.Config{}
	if k.netns >= 0 {
		cfg.NetNS = k.netns
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return res, fmt.Errorf("opening ctnetlink socket: %w", classify(err))
	}
	defer c.Close()
	// The kernel's reason for an EINVAL, if it has one.
	_ = c.SetOption(netlink.ExtendedAcknowledge, true)
	var errs []error
	var seq uint32
	res.Outcomes = make([]RestoreOutcome, len(entries))
	fail := func(i int, err error) {
		res.Failed++
		res.Outcomes[i] = OutcomeFailed
		if len(errs) < maxRestoreErrors {
			errs = append(errs, fmt.Errorf("%s: %w", entries[i], err))
		}
	}
	// Create; entries found by their original tuple are refreshed when
	// they are the same connection's (found by their reply tuple), and
	// replaced when they are another's. NoCreate entries are only
	// refreshed.
	var create, refresh, replace []int // indexes in entries
	for i, e := range entries {
		if e.NoCreate {
			refresh = append(refresh, i)
		} else {
			create = append(create, i)
		}
	}
	err = eachChunk(ctx, create, func(chunk []int) error {
		results, err := k.create(ctx, c, &seq, pick(entries, chunk))
		for j, err := range results {
			i := chunk[j]
			switch {
			case err == nil:
				res.Created++
				res.Outcomes[i] = OutcomeCreated
			case errors.Is(err, unix.EEXIST):
				res.Existing++
				res.Outcomes[i] = OutcomeExisting
				if entries[i].Refresh {
					refresh = append(refresh, i)
				}
			default:
				fail(i, err)
			}
		}
		return err
	})
	if err == nil {
		err = eachChunk(ctx, refresh, func(chunk []int) error {
			results, err := k.send(ctx, c, &seq, pick(entries, chunk), newRefreshMessage)
			for j, err := range results {
				i := chunk[j]
				switch {
				case err == nil:
					if entries[i].NoCreate {
						res.Existing++
					}
					res.Refreshed++
					res.Outcomes[i] = OutcomeRefreshed
				case errors.Is(err, unix.ENOENT) && entries[i].NoCreate:
					res.Absent++
					res.Outcomes[i] = OutcomeAbsent
				case errors.Is(err, unix.ENOENT):
					replace = append(replace, i)
				default:
					fail(i, err)
				}
			}
			return err
		})
	}
	if err == nil {
		err = eachChunk(ctx, replace, func(chunk []int) error {
			if _, err := k.send(ctx, c, &seq, pick(entries, chunk), newDeleteMessage); err != nil { // ENOENT: gone meanwhile
				return err
			}
			results, err := k.create(ctx, c, &seq, pick(entries, chunk))
			for j, err := range results {
				i := chunk[j]
				switch {
				case err == nil:
					res.Replaced++
					res.Outcomes[i] = OutcomeReplaced
				case errors.Is(err, unix.EEXIST): // a packet made one meanwhile
				default:
					fail(i, err)
				}
			}
			return err
		})
	}
	if err != nil {
		return res, errors.Join(append(errs, err)...)
	}
	if len(errs) > 0 && res.Failed > len(errs) {
		errs = append(errs, fmt.Errorf("and %d more", res.Failed-len(errs)))
	}
	return res, errors.Join(errs...)
}

// eachChunk calls f with the indexes idx restoreChunk at a time until f fails or ctx ends.
func eachChunk(ctx context.Context, idx []int, f func([]int) error) error {
	for start := 0; start < len(idx); start += restoreChunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f(idx[start:min(start+restoreChunk, len(idx))]); err != nil {
			return err
		}
	}
	return nil
}

// pick returns the entries at idx.
func pick(entries []ConntrackEntry, idx []int) []ConntrackEntry {
	out := make([]ConntrackEntry, len(idx))
	for j, i := range idx {
		out[j] = entries[i]
	}
	return out
}

// create sends the requests creating entries and returns each one's
// result; the error is for the socket.
func (k *Kernel) create(ctx context.Context, c *netlink.Conn, seq *uint32, entries []ConntrackEntry) ([]error, error) {
	status := uint32(restoredStatus)
	if statusNoConfirmed.Load() {
		status &^= ipsConfirmed
	}
	results, err := k.send(ctx, c, seq, entries, func(e ConntrackEntry) (netlink.Message, error) { return newConntrackMessage(e, status) })
	if err != nil {
		return nil, err
	}
	for i, err := range results {
		if errors.Is(err, unix.EBUSY) && status&ipsConfirmed != 0 {
			// Once per process on such a kernel: retry without CONFIRMED.
			again, err := k.send(ctx, c, seq, entries[i:i+1], func(e ConntrackEntry) (netlink.Message, error) {
				return newConntrackMessage(e, status&^ipsConfirmed)
			})
			if err == nil {
				results[i] = again[0]
				if again[0] == nil || errors.Is(again[0], unix.EEXIST) {
					statusNoConfirmed.Store(true)
				}
			}
		}
	}
	return results, nil
}

// send writes one request per entry in one sendmsg and returns each one's
// result, in order; the error is for the socket. ctnetlink handles the
// requests of a datagram one by one before sendmsg returns, and answers a
// failed request with an error carrying its sequence number; only the last
// request asks for an ack, which ends the batch. Acking every request would
// cost a recvmsg each, and about halve the rate of a large restore.
func (k *Kernel) send(ctx context.Context, c *netlink.Conn, seq *uint32, entries []ConntrackEntry,
	request func(ConntrackEntry) (netlink.Message, error)) ([]error, error) {
	results := make([]error, len(entries))
	msgs := make([]netlink.Message, 0, len(entries))
	bySeq := map[uint32]int{} // entry of each request
	for i, e := range entries {
		m, err := request(e)
		if err != nil {
			results[i] = err
			continue
		}
		*seq++
		m.Header.Sequence = *seq
		m.Header.Flags &^= netlink.Acknowledge
		bySeq[*seq] = i
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return results, nil
	}
	msgs[len(msgs)-1].Header.Flags |= netlink.Acknowledge
	last := msgs[len(msgs)-1].Header.Sequence
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if _, err := c.SendMessages(msgs); err != nil {
		return nil, fmt.Errorf("sending ctnetlink requests: %w", classify(err))
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 64<<10)
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		}); err != nil {
			return nil, fmt.Errorf("reading ctnetlink acks: %w", err)
		}
		if rerr != nil {
			return nil, fmt.Errorf("reading ctnetlink acks: %w", rerr)
		}
		replies, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("reading ctnetlink acks: %w", err)
		}
		for _, m := range replies {
			i, ok := bySeq[m.Header.Seq]
			if m.Header.Type != unix.NLMSG_ERROR || !ok || len(m.Data) < 4 {
				continue // not ours: a late answer to an earlier batch
			}
			results[i] = ackError(m)
			if m.Header.Seq == last {
				return results, nil
			}
		}
	}
}

// ackError returns the errno of an NLMSG_ERROR (nil for an ack) with the
// kernel's extended-ack message, if it gave one.
func ackError(m syscall.NetlinkMessage) error {
	code := int32(binary.NativeEndian.Uint32(m.Data))
	if code == 0 {
		return nil
	}
	errno := unix.Errno(-code)
	if m.Header.Flags&unix.NLM_F_ACK_TLVS == 0 || len(m.Data) < 4+unix.NLMSG_HDRLEN {
		return errno
	}
	// The TLVs follow the echoed request, or only its header if capped.
	off := 4 + unix.NLMSG_HDRLEN
	if m.Header.Flags&unix.NLM_F_CAPPED == 0 {
		off = 4 + int(binary.NativeEndian.Uint32(m.Data[4:8]))
	}
	if off > len(m.Data) {
		return errno
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[off:])
	if err != nil {
		return errno
	}
	for ad.Next() {
		if ad.Type() == unix.NLMSGERR_ATTR_MSG {
			return fmt.Errorf("%w (%s)", errno, ad.String())
		}
	}
	return errno
}
