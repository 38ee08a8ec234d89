package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// State is a BFD session state (RFC 5880 §4.1), as carried on the wire.
type State uint8

// Session states; the values are the wire encoding.
const (
	AdminDown State = 0
	Down      State = 1
	Init      State = 2
	Up        State = 3
)

func (s State) String() string {
	switch s {
	case AdminDown:
		return "admin-down"
	case Down:
		return "down"
	case Init:
		return "init"
	case Up:
		return "up"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Diag is the diagnostic code: why the session last left Up (RFC 5880 §4.1).
type Diag uint8

// Diagnostic codes; the values are the wire encoding.
const (
	DiagNone              Diag = 0
	DiagDetectionExpired  Diag = 1 // Control Detection Time Expired
	DiagEchoFailed        Diag = 2
	DiagNeighborDown      Diag = 3 // Neighbor Signaled Session Down
	DiagForwardingReset   Diag = 4
	DiagPathDown          Diag = 5
	DiagConcatPathDown    Diag = 6
	DiagAdminDown         Diag = 7 // Administratively Down
	DiagReverseConcatDown Diag = 8
)

// Wire layout (RFC 5880 §4.1).
const (
	versionBFD1      = 1
	headerLen        = 24 // the mandatory section
	authHeaderMinLen = 2  // auth type + auth len
	versionShift     = 5
	stateShift       = 6
	diagMask         = 0x1f
	flagPoll         = 0x20
	flagFinal        = 0x10
	flagCPI          = 0x08
	flagAuth         = 0x04
	flagDemand       = 0x02
	flagMultipoint   = 0x01
	maxMicroseconds  = 1<<32 - 1
)

var diagNames = [...]string{
	"none", "control-detection-time-expired", "echo-function-failed", "neighbor-signaled-down",
	"forwarding-plane-reset", "path-down", "concatenated-path-down", "administratively-down",
	"reverse-concatenated-path-down",
}

func (d Diag) String() string {
	if int(d) < len(diagNames) {
		return diagNames[d]
	}
	return fmt.Sprintf("diag(%d)", uint8(d))
}

// Packet is a BFD Control packet without authentication section (RFC 5880
// §4.1). Intervals are in microseconds, as on the wire.
type Packet struct {
	Diag  Diag
	State State
	// Flags.
	Poll, Final, ControlPlaneIndependent, Demand bool
	DetectMult                                   uint8
	MyDiscriminator, YourDiscriminator           uint32
	DesiredMinTxInterval                         uint32 // µs
	RequiredMinRxInterval                        uint32 // µs
	RequiredMinEchoRxInterval                    uint32 // µs
}

// Errors of ParsePacket: RFC 5880 §6.8.6 says each such packet MUST be
// discarded. Wrapped with details; compare with errors.Is.
var (
	ErrMalformed    = errors.New("bfd: malformed control packet")
	ErrAuthRequired = errors.New("bfd: authenticated packet but no authentication configured")
)

// ParsePacket decodes and validates a BFD Control packet: the checks of RFC
// 5880 §6.8.6 that need nothing but the packet itself (version, length,
// detect multiplier, multipoint, discriminators, authentication). Bytes
// after Length (padding of the encapsulation) are ignored.
func ParsePacket(b []byte) (Packet, error) {
	var p Packet
	if len(b) < headerLen {
		return p, fmt.Errorf("%w: %d bytes, want at least %d", ErrMalformed, len(b), headerLen)
	}
	if v := b[0] >> versionShift; v != versionBFD1 {
		return p, fmt.Errorf("%w: version %d", ErrMalformed, v)
	}
	flags := b[1]
	length := int(b[3])
	authPresent := flags&flagAuth != 0
	switch {
	case length < headerLen:
		return p, fmt.Errorf("%w: length field %d < %d", ErrMalformed, length, headerLen)
	case authPresent && length < headerLen+authHeaderMinLen:
		return p, fmt.Errorf("%w: length field %d too short for an authentication section", ErrMalformed, length)
	case length > len(b):
		return p, fmt.Errorf("%w: length field %d > %d bytes received", ErrMalformed, length, len(b))
	}
	p = Packet{
		Diag:                      Diag(b[0] & diagMask),
		State:                     State(flags >> stateShift),
		Poll:                      flags&flagPoll != 0,
		Final:                     flags&flagFinal != 0,
		ControlPlaneIndependent:   flags&flagCPI != 0,
		Demand:                    flags&flagDemand != 0,
		DetectMult:                b[2],
		MyDiscriminator:           binary.BigEndian.Uint32(b[4:]),
		YourDiscriminator:         binary.BigEndian.Uint32(b[8:]),
		DesiredMinTxInterval:      binary.BigEndian.Uint32(b[12:]),
		RequiredMinRxInterval:     binary.BigEndian.Uint32(b[16:]),
		RequiredMinEchoRxInterval: binary.BigEndian.Uint32(b[20:]),
	}
	switch {
	case p.DetectMult == 0:
		return p, fmt.Errorf("%w: detect multiplier 0", ErrMalformed)
	case flags&flagMultipoint != 0:
		return p, fmt.Errorf("%w: multipoint bit set", ErrMalformed)
	case p.MyDiscriminator == 0:
		return p, fmt.Errorf("%w: my discriminator 0", ErrMalformed)
	case p.YourDiscriminator == 0 && p.State != Down && p.State != AdminDown:
		return p, fmt.Errorf("%w: your discriminator 0 in state %v", ErrMalformed, p.State)
	case p.Poll && p.Final:
		// RFC 5880 §4.1: "a BFD Control packet MUST NOT have both the Poll
		// (P) and Final (F) bits set".
		return p, fmt.Errorf("%w: poll and final both set", ErrMalformed)
	case authPresent:
		return p, ErrAuthRequired
	}
	return p, nil
}

// Append encodes p (without authentication) onto b.
func (p *Packet) Append(b []byte) []byte {
	var flags byte
	for _, f := range []struct {
		on  bool
		bit byte
	}{{p.Poll, flagPoll}, {p.Final, flagFinal}, {p.ControlPlaneIndependent, flagCPI}, {p.Demand, flagDemand}} {
		if f.on {
			flags |= f.bit
		}
	}
	flags |= byte(p.State&3) << stateShift
	b = append(b, versionBFD1<<versionShift|byte(p.Diag&diagMask), flags, p.DetectMult, headerLen)
	b = binary.BigEndian.AppendUint32(b, p.MyDiscriminator)
	b = binary.BigEndian.AppendUint32(b, p.YourDiscriminator)
	b = binary.BigEndian.AppendUint32(b, p.DesiredMinTxInterval)
	b = binary.BigEndian.AppendUint32(b, p.RequiredMinRxInterval)
	return binary.BigEndian.AppendUint32(b, p.RequiredMinEchoRxInterval)
}

// String is a one-line summary for logs and test failures.
func (p Packet) String() string {
	var f string
	if p.Poll {
		f += "P"
	}
	if p.Final {
		f += "F"
	}
	return fmt.Sprintf("{%v diag=%v %s mult=%d my=%#x your=%#x tx=%dus rx=%dus}", p.State, p.Diag, f,
		p.DetectMult, p.MyDiscriminator, p.YourDiscriminator, p.DesiredMinTxInterval, p.RequiredMinRxInterval)
}

// micros converts d to wire microseconds, saturating.
func micros(d time.Duration) uint32 {
	us := d.Microseconds()
	if us < 0 {
		return 0
	}
	if us > maxMicroseconds {
		return maxMicroseconds
	}
	return uint32(us)
}

// duration converts wire microseconds to a Duration.
func duration(us uint32) time.Duration { return time.Duration(us) * time.Microsecond }
