package maglev

import (
	"fmt"
	"net/netip"
	"testing"
)

// The SipHash core against the reference implementation's test vector for
// the 4-byte message 00 01 02 03 under the key 00 01 … 0f (SipHash-2-4;
// the kernel runs the same rounds 1-3 times).
func TestSipHashVector(t *testing.T) {
	key := [2]uint64{0x0706050403020100, 0x0f0e0d0c0b0a0908}
	if got, want := sipHash(2, 4, 0x03020100, key), uint64(0xcf2794e0277187b7); got != want {
		t.Errorf("SipHash-2-4(00 01 02 03) = %#x, want %#x", got, want)
	}
}

func dests(weights ...int) []Destination {
	var out []Destination
	for i, w := range weights {
		out = append(out, Destination{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(11 + i)}), Port: 80, LastWeight: w, Weight: w})
	}
	return out
}

// Slots follow the weights (the table is filled round by round, so only
// roughly), and every slot is taken once a destination has a weight.
func TestTableSlots(t *testing.T) {
	for _, tc := range []struct {
		weights []int
		want    []int // slots per destination, within 2 %
	}{
		{[]int{1, 1, 1, 1}, []int{1023, 1023, 1023, 1023}},
		{[]int{1, 2, 1, 3}, []int{585, 1169, 585, 1754}},
		{[]int{100, 200}, []int{1364, 2729}},
		{[]int{0, 5}, []int{0, 4093}},
		{[]int{1000, 1}, []int{4028, 65}}, // 1000 > 6 bits: shifted down, the small one keeps one per round
	} {
		t.Run(fmt.Sprint(tc.weights), func(t *testing.T) {
			got := New(dests(tc.weights...)).Slots()
			total := 0
			for i, n := range got {
				total += n
				if diff := n - tc.want[i]; diff*50 > tc.want[i]+50 || -diff*50 > tc.want[i]+50 {
					t.Errorf("destination %d: %d slots, want about %d (all: %v)", i, n, tc.want[i], got)
				}
			}
			if total != TableSize {
				t.Errorf("%d slots filled, want %d", total, TableSize)
			}
		})
	}
	if got := New(dests(0, 0)).Pick(netip.MustParseAddr("10.0.0.100"), 0, true); got.Dest != -1 || got.Owner != -1 {
		t.Errorf("without weights: %+v, want no destination", got)
	}
}

// A destination at weight 0 keeps its slots; with mh-fallback its flows go
// to others (and only its flows move), without they are dropped.
func TestPickFallback(t *testing.T) {
	ds := dests(1, 1, 1)
	before := New(ds)
	ds[1].Weight = 0
	after := New(ds)
	moved, kept := 0, 0
	for i := range 2000 {
		client := netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)})
		b, a := before.Pick(client, 0, true), after.Pick(client, 0, true)
		if a.Slot != b.Slot || a.Owner != b.Owner {
			t.Fatalf("%s: slot %d/%d, owner %d/%d: the table changed with the weight", client, b.Slot, a.Slot, b.Owner, a.Owner)
		}
		switch {
		case b.Dest != 1 && a.Dest != b.Dest:
			t.Errorf("%s moved from %d to %d, though its destination is available", client, b.Dest, a.Dest)
		case b.Dest == 1 && (a.Dest == 1 || a.Dest < 0 || a.Rehashed == 0):
			t.Errorf("%s: %+v after its destination went to weight 0", client, a)
		case b.Dest == 1:
			moved++
		default:
			kept++
		}
		if nf := after.Pick(client, 0, false); b.Dest == 1 && nf.Dest != -1 {
			t.Errorf("%s: without mh-fallback got %d, want dropped", client, nf.Dest)
		}
	}
	if moved < 500 || kept < 1000 {
		t.Errorf("%d flows moved, %d kept: want about a third moved", moved, kept)
	}
}
