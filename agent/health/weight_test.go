package health

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseWeight(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   int
		bad    bool
	}{
		{"absent", nil, NoWeight, false},
		{"zero", []string{"0"}, 0, false},
		{"valid", []string{"7"}, 7, false},
		{"maximum", []string{"1000"}, 1000, false},
		{"spaces trimmed", []string{" 7 "}, 7, false},
		{"tab trimmed", []string{"\t42"}, 42, false},
		{"leading zeros", []string{"007"}, 7, false},
		{"repeated identical header", []string{"5", "5"}, 5, false},
		{"too large", []string{"1001"}, 0, true},
		{"far too large", []string{"99999999999999999999"}, 0, true},
		{"negative", []string{"-1"}, 0, true},
		{"plus sign", []string{"+7"}, 0, true},
		{"letters", []string{"abc"}, 0, true},
		{"empty", []string{""}, 0, true},
		{"blank", []string{"   "}, 0, true},
		{"fraction", []string{"1.5"}, 0, true},
		{"exponent", []string{"1e3"}, 0, true},
		{"hex", []string{"0x10"}, 0, true},
		{"inner space", []string{"1 0"}, 0, true},
		{"differing headers", []string{"5", "6"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, bad := parseWeight(tt.values)
			if (bad != "") != tt.bad {
				t.Fatalf("bad = %q, want bad %v", bad, tt.bad)
			}
			if !tt.bad && w != tt.want {
				t.Errorf("weight %d, want %d", w, tt.want)
			}
		})
	}
}

func TestParseWeightTruncatesBadValue(t *testing.T) {
	long := make([]byte, 1000)
	for i := range long {
		long[i] = 'x'
	}
	_, bad := parseWeight([]string{string(long)})
	if len(bad) > maxBadValue+len("…") {
		t.Errorf("bad value kept %d bytes", len(bad))
	}
}

func TestParseWeightTruncatesBetweenCharacters(t *testing.T) {
	// 31 ASCII bytes, then a 3-byte character across the cut at 32.
	_, bad := parseWeight([]string{strings.Repeat("x", maxBadValue-1) + "€€€"})
	if !utf8.ValidString(bad) {
		t.Errorf("bad value %q is not valid UTF-8", bad)
	}
	if want := strings.Repeat("x", maxBadValue-1) + "…"; bad != want {
		t.Errorf("bad value %q, want %q", bad, want)
	}
}
