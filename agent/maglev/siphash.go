package maglev

import "math/bits"

// hsiphash32 is the kernel's hsiphash of one 32-bit word on a 64-bit
// machine, where "HalfSipHash" is SipHash-1-3 with the result truncated to
// 32 bits.
func hsiphash32(word uint32, key [2]uint64) uint32 {
	return uint32(sipHash(1, 3, word, key))
}

// sipHash is SipHash-c-d of the 4-byte little-endian message word.
func sipHash(c, d int, word uint32, key [2]uint64) uint64 {
	v0 := uint64(0x736f6d6570736575) ^ key[0]
	v1 := uint64(0x646f72616e646f6d) ^ key[1]
	v2 := uint64(0x6c7967656e657261) ^ key[0]
	v3 := uint64(0x7465646279746573) ^ key[1]
	b := uint64(4)<<56 | uint64(word) // the length in the top byte, the word little-endian
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13) ^ v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16) ^ v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21) ^ v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17) ^ v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	v3 ^= b
	for range c {
		round()
	}
	v0 ^= b
	v2 ^= 0xff
	for range d {
		round()
	}
	return v0 ^ v1 ^ v2 ^ v3
}
