package route

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseCommunity(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Community
		err  bool
	}{
		{"65000:100", 65000<<16 | 100, false},
		{"0:0", 0, false},
		{"no-export", 0xFFFFFF01, false},
		{"NO-ADVERTISE", 0xFFFFFF02, false},
		{"65536:1", 0, true},
		{"65000", 0, true},
		{"a:b", 0, true},
	} {
		got, err := ParseCommunity(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseCommunity(%q) = %v, %v", tc.in, got, err)
		}
		if err == nil && !strings.HasPrefix(tc.in, "no") && !strings.HasPrefix(tc.in, "NO") && got.String() != tc.in {
			t.Errorf("%q prints as %s", tc.in, got)
		}
	}
	lc, err := ParseLargeCommunity("4200000000:1:2")
	if err != nil || lc != (LargeCommunity{4200000000, 1, 2}) || lc.String() != "4200000000:1:2" {
		t.Errorf("large: %v %v", lc, err)
	}
	for _, bad := range []string{"1:2", "1:2:3:4", "1:x:3", "4294967296:1:1"} {
		if _, err := ParseLargeCommunity(bad); err == nil {
			t.Errorf("ParseLargeCommunity(%q) accepted", bad)
		}
	}
}

func TestRouteEqualAndString(t *testing.T) {
	m1, m2 := uint32(5), uint32(5)
	a := Route{Prefix: netip.MustParsePrefix("192.0.2.10/32"), MED: &m1, Communities: []Community{65000<<16 | 1}}
	b := a
	b.MED = &m2
	if !a.Equal(b) {
		t.Error("equal MED values by different pointers differ")
	}
	b.MED = nil
	if a.Equal(b) {
		t.Error("MED set vs unset equal")
	}
	c := a
	c.LargeCommunities = []LargeCommunity{{1, 2, 3}}
	if a.Equal(c) {
		t.Error("large communities ignored")
	}
	want := "192.0.2.10/32 community 65000:1 large-community 1:2:3 med 5"
	if got := c.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
