package ipvs

import "encoding/binary"

// The kernel keeps an IPv4 netmask as the raw mask bytes in a host-order u32.
func nativeUint32(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }

func nativeBytes(v uint32) []byte {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, v)
	return b
}
