// Package configsync is the wire and the merge rule of cluster-wide
// configuration distribution (cluster.config_sync): a director listed as a
// config source publishes each file of its services directory as a signed
// record; every director keeps, per file name, the record the rule below
// picks, and the directors compare digests of what they keep to pull what
// they miss. It knows nothing of files or of the network: the agent reads
// and writes the services directory, the cluster node carries the
// messages.
//
// Every message starts with Magic and Version, then its kind:
//
//	record:    publisher | version (uint64) | flags | name | path (uint16 length) |
//	           data (uint32 length) | signature of the publisher
//	digest:    sender | sum (16) | records (uint32) | signature of the sender
//	inventory: sender | entries (uint16): name | publisher | version (uint64) | flags
//	           | signature of the sender
//
// Strings without a stated length prefix have a one-byte length. A record
// is forwarded as it came, so a director that missed it gets the
// publisher's own signature from any peer.
package configsync

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/lvsd/lvsd/cluster/identity"
)

// Magic starts every configuration message: the cluster node hands such
// user messages to the syncer. A director of the release before decodes
// them as heartbeats, fails, and drops them.
const Magic = 'C'

// Version is the wire version of this build's messages.
const Version = 1

// Kinds of messages.
const (
	KindRecord    = 1
	KindDigest    = 2
	KindInventory = 3
)

// Bounds of what a message may carry: a packet can cause no more work
// than this.
const (
	// MaxData is the largest service file distributed: the largest one
	// lvsd reads (config.MaxFileSize) less room for the rest of a record,
	// so that a record fits the cluster's 1 MiB stream.
	MaxData = 1<<20 - 8<<10
	// MaxFiles bounds the records a director keeps, tombstones included,
	// and so an inventory.
	MaxFiles = 4096
	// MaxBytes bounds the data of all records kept together: what a
	// director holds in memory for config sync.
	MaxBytes = 64 << 20
	// MaxName is the longest file name and MaxPath the longest path.
	MaxName = 255
	MaxPath = 4096
	// maxSender is the cluster's bound on a node name.
	maxSender = 128
)

// flagDeleted marks a tombstone: the publisher removed the file.
const flagDeleted = 1

// Record is one published service file, or its tombstone.
type Record struct {
	Publisher string // the director that published it
	// Version orders the publications of a name: the file's modification
	// time in Unix nanoseconds, or the time its removal was seen.
	Version uint64
	Deleted bool
	Name    string // the file's name in the services directory
	Path    string // the file's path on the publisher, for error messages
	Data    []byte
	// Wire is the signed message as it came or was made: forwarded as
	// it is.
	Wire []byte
}

// Key is the record's place in the order of the merge rule.
func (r *Record) Key() Stamp {
	return Stamp{Version: r.Version, Publisher: r.Publisher, Deleted: r.Deleted}
}

// Stamp is what an inventory says of a record.
type Stamp struct {
	Version   uint64
	Publisher string
	Deleted   bool
}

// Newer reports whether s wins over o under the merge rule: the higher
// version, then the publisher's name ordered bytewise. Two publications
// of one publisher with the same version are the same one.
func (s Stamp) Newer(o Stamp) bool {
	if s.Version != o.Version {
		return s.Version > o.Version
	}
	return s.Publisher > o.Publisher
}

var (
	errShort   = errors.New("config sync message truncated")
	errTrailer = errors.New("config sync message has bytes past its end")
)

// CheckName says what is wrong with a file name a record carries: it
// must name a service file directly in the services directory.
func CheckName(name string) error {
	switch {
	case name == "" || len(name) > MaxName:
		return fmt.Errorf("file name of %d bytes, want 1-%d", len(name), MaxName)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("file name %q has a slash or a NUL", name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("file name %q is hidden", name)
	case !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml"):
		return fmt.Errorf("file name %q is not *.yaml or *.yml", name)
	}
	return nil
}

// EncodeRecord makes the signed message of r (r.Wire is ignored).
func EncodeRecord(r Record, keys *identity.Keys) ([]byte, error) {
	if err := checkRecord(r); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 3+1+len(r.Publisher)+8+1+1+len(r.Name)+2+len(r.Path)+4+len(r.Data)+identity.SignatureSize)
	b = append(b, Magic, Version, KindRecord)
	b = appendString(b, r.Publisher)
	b = binary.BigEndian.AppendUint64(b, r.Version)
	var flags byte
	if r.Deleted {
		flags |= flagDeleted
	}
	b = append(b, flags)
	b = appendString(b, r.Name)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Path)))
	b = append(b, r.Path...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Data)))
	b = append(b, r.Data...)
	return keys.Sign(b), nil
}

func checkRecord(r Record) error {
	if err := CheckName(r.Name); err != nil {
		return err
	}
	switch {
	case r.Publisher == "" || len(r.Publisher) > maxSender:
		return fmt.Errorf("publisher name of %d bytes, want 1-%d", len(r.Publisher), maxSender)
	case len(r.Path) > MaxPath:
		return fmt.Errorf("path of %d bytes, longer than %d", len(r.Path), MaxPath)
	case len(r.Data) > MaxData:
		return fmt.Errorf("%s has %d bytes, more than the %d a director distributes", r.Name, len(r.Data), MaxData)
	case r.Deleted && len(r.Data) > 0:
		return errors.New("a tombstone carries no data")
	}
	return nil
}

// Digest is a director's summary of the records it keeps.
type Digest struct {
	Sender  string
	Sum     [16]byte
	Records uint32
}

// EncodeDigest makes the signed message of d.
func EncodeDigest(d Digest, keys *identity.Keys) []byte {
	b := make([]byte, 0, 3+1+len(d.Sender)+16+4+identity.SignatureSize)
	b = append(b, Magic, Version, KindDigest)
	b = appendString(b, d.Sender)
	b = append(b, d.Sum[:]...)
	b = binary.BigEndian.AppendUint32(b, d.Records)
	return keys.Sign(b)
}

// Entry is a record as an inventory lists it.
type Entry struct {
	Name string
	Stamp
}

// Inventory is what a director keeps, by name and stamp: the peer that
// gets it sends back the records it keeps that are newer or missing.
type Inventory struct {
	Sender  string
	Entries []Entry
}

// EncodeInventory makes the signed message of inv.
func EncodeInventory(inv Inventory, keys *identity.Keys) []byte {
	b := make([]byte, 0, 3+1+len(inv.Sender)+2+len(inv.Entries)*48+identity.SignatureSize)
	b = append(b, Magic, Version, KindInventory)
	b = appendString(b, inv.Sender)
	b = binary.BigEndian.AppendUint16(b, uint16(len(inv.Entries)))
	for _, e := range inv.Entries {
		b = appendString(b, e.Name)
		b = appendString(b, e.Publisher)
		b = binary.BigEndian.AppendUint64(b, e.Version)
		var flags byte
		if e.Deleted {
			flags = flagDeleted
		}
		b = append(b, flags)
	}
	return keys.Sign(b)
}

func appendString(b []byte, s string) []byte {
	return append(append(b, byte(len(s))), s...)
}

// Message is a decoded message: exactly one of its fields is set.
type Message struct {
	Record    *Record
	Digest    *Digest
	Inventory *Inventory
}

// Signer is the director whose key must have signed the message: the
// publisher of a record, the sender of the rest.
func (m Message) Signer() string {
	switch {
	case m.Record != nil:
		return m.Record.Publisher
	case m.Digest != nil:
		return m.Digest.Sender
	case m.Inventory != nil:
		return m.Inventory.Sender
	}
	return ""
}

// Decode parses a message and checks its signature against keys, which
// must enforce identities. It checks the form only: whether the signer
// may publish is the receiver's to say (Store.Accept).
func Decode(b []byte, keys *identity.Keys) (Message, error) {
	if len(b) < 3+identity.SignatureSize || b[0] != Magic {
		return Message{}, errShort
	}
	if b[1] != Version {
		return Message{}, fmt.Errorf("config sync message of version %d, this lvsd reads %d", b[1], Version)
	}
	signed, sig := b[:len(b)-identity.SignatureSize], b[len(b)-identity.SignatureSize:]
	r := reader{b: signed[3:]}
	var m Message
	switch b[2] {
	case KindRecord:
		m.Record = r.record()
		if m.Record != nil {
			m.Record.Wire = b
		}
	case KindDigest:
		d := &Digest{Sender: r.str()}
		copy(d.Sum[:], r.take(16))
		d.Records = r.u32()
		m.Digest = d
	case KindInventory:
		m.Inventory = r.inventory()
	default:
		return Message{}, fmt.Errorf("config sync message of unknown kind %d", b[2])
	}
	if r.err != nil {
		return Message{}, r.err
	}
	if len(r.b) != 0 {
		return Message{}, errTrailer
	}
	if !keys.Enforced() {
		return Message{}, errors.New("config sync needs cluster.directors to check signatures")
	}
	signer := m.Signer()
	if signer == "" || len(signer) > maxSender {
		return Message{}, fmt.Errorf("config sync message signer name of %d bytes", len(signer))
	}
	if err := keys.Verify(signer, signed, sig); err != nil {
		return Message{}, fmt.Errorf("config sync message of %q: %w", signer, err)
	}
	return m, nil
}

// reader takes fields off a message; the first problem sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.err = errShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *reader) str() string { return string(r.take(int(r.u8()))) }

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) record() *Record {
	rec := &Record{Publisher: r.str(), Version: r.u64()}
	flags := r.u8()
	rec.Deleted = flags&flagDeleted != 0
	rec.Name = r.str()
	rec.Path = string(r.take(int(r.u16())))
	n := r.u32()
	if r.err == nil && n > MaxData {
		r.fail(fmt.Errorf("config sync record of %d bytes, more than %d", n, MaxData))
	}
	if data := r.take(int(n)); len(data) > 0 {
		rec.Data = append([]byte(nil), data...)
	}
	if r.err != nil {
		return nil
	}
	if flags&^flagDeleted != 0 {
		r.fail(fmt.Errorf("config sync record with unknown flags %#x", flags))
		return nil
	}
	if err := checkRecord(*rec); err != nil {
		r.fail(fmt.Errorf("config sync record: %w", err))
		return nil
	}
	return rec
}

func (r *reader) inventory() *Inventory {
	inv := &Inventory{Sender: r.str()}
	n := int(r.u16())
	if n > MaxFiles {
		r.fail(fmt.Errorf("config sync inventory of %d entries, more than %d", n, MaxFiles))
		return nil
	}
	inv.Entries = make([]Entry, 0, min(n, len(r.b)/11))
	for range n {
		e := Entry{Name: r.str()}
		e.Publisher = r.str()
		e.Version = r.u64()
		flags := r.u8()
		e.Deleted = flags&flagDeleted != 0
		if r.err != nil {
			return nil
		}
		if err := CheckName(e.Name); err != nil {
			r.fail(fmt.Errorf("config sync inventory: %w", err))
			return nil
		}
		inv.Entries = append(inv.Entries, e)
	}
	return inv
}
