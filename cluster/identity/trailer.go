package identity

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire version 4 of heartbeats and relay messages ends each message with
// the same trailer after the version 3 layout:
//
//	extensions | uint16 length of the extensions | signature (64 bytes)
//
// The signature is there when a flag of the message says so (each message
// kind has its own flags byte) and is Ed25519 over every byte before it.
// The extensions are TLVs: a type byte, a length byte, that many bytes. A
// reader skips the types it does not know, so later additions need no new
// wire version; only a change an older reader must not skip needs one.

// Seal appends an empty extensions section and, when keys signs, the
// signature of everything before it.
func (k *Keys) Seal(msg []byte) []byte { return k.SealWith(msg, nil) }

// SealWith appends the extensions exts (well-formed TLVs, at most 65535
// bytes) and, when keys signs, the signature of everything before it: the
// extensions are signed with the rest.
func (k *Keys) SealWith(msg, exts []byte) []byte {
	msg = append(msg, exts...)
	msg = binary.BigEndian.AppendUint16(msg, uint16(len(exts)))
	if k.Signs() {
		msg = k.Sign(msg)
	}
	return msg
}

// TrailerRoom is how many bytes Seal adds.
func (k *Keys) TrailerRoom() int {
	if k.Signs() {
		return 2 + SignatureSize
	}
	return 2
}

// ErrShort is a message too short for its trailer.
var ErrShort = errors.New("message truncated")

// Open takes the trailer off a v4 message b whose flags say whether it is
// signed: it returns the version 3 layout before the extensions, what the
// signature signs and the signature (both nil when unsigned). fixed is
// how long the version 3 layout is at least. Extensions are checked to be
// well formed and skipped.
func Open(b []byte, signed bool, fixed int) (body, covered, sig []byte, err error) {
	body, _, covered, sig, err = OpenWith(b, signed, fixed)
	return body, covered, sig, err
}

// OpenWith is Open that also returns the extensions, well formed: a reader
// looks up the types it knows (Extension) and skips the rest.
func OpenWith(b []byte, signed bool, fixed int) (body, exts, covered, sig []byte, err error) {
	rest := b
	if signed {
		if len(b) < fixed+2+SignatureSize {
			return nil, nil, nil, nil, ErrShort
		}
		rest, sig = b[:len(b)-SignatureSize], b[len(b)-SignatureSize:]
		covered = rest
	}
	if len(rest) < fixed+2 {
		return nil, nil, nil, nil, ErrShort
	}
	n := int(binary.BigEndian.Uint16(rest[len(rest)-2:]))
	if n > len(rest)-2-fixed {
		return nil, nil, nil, nil, fmt.Errorf("extensions of %d bytes in a message of %d", n, len(b))
	}
	body, exts = rest[:len(rest)-2-n], rest[len(rest)-2-n:len(rest)-2]
	for e := exts; len(e) > 0; e = e[2+int(e[1]):] {
		if len(e) < 2 || len(e) < 2+int(e[1]) {
			return nil, nil, nil, nil, errors.New("an extension runs past the extensions")
		}
	}
	return body, exts, covered, sig, nil
}

// Extension returns the value of the first extension of type typ in exts
// (well formed, as OpenWith returns them), and whether there is one.
func Extension(exts []byte, typ byte) ([]byte, bool) {
	for len(exts) >= 2 && len(exts) >= 2+int(exts[1]) {
		if exts[0] == typ {
			return exts[2 : 2+int(exts[1])], true
		}
		exts = exts[2+int(exts[1]):]
	}
	return nil, false
}
