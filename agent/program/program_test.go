package program

import (
	"slices"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	environ := []string{"PATH=/bin", "HOME=/root", "USER=root", "SECRET=x", "LC_ALL=C", "TZ=UTC", "NOTIFY_SOCKET=/run/x"}
	for _, tc := range []struct {
		name     string
		environ  []string
		account  bool
		expected []string
	}{
		{"with the account", environ, true, []string{"HOME=/root", "USER=root", "LC_ALL=C", "TZ=UTC", "PATH=/bin"}},
		{"without", environ, false, []string{"LC_ALL=C", "TZ=UTC", "PATH=/bin"}},
		{"no PATH", []string{"LANG=C.UTF-8"}, false, []string{"LANG=C.UTF-8", DefaultPath}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Env(tc.environ, tc.account); !slices.Equal(got, tc.expected) {
				t.Errorf("Env = %q, want %q", got, tc.expected)
			}
		})
	}
}

func TestOutputKeepsTheStart(t *testing.T) {
	w := &Output{Max: 10}
	for _, s := range []string{"hello\n", "  world\t", "and more"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := w.Line(); got != "hello wo" {
		t.Errorf("Line = %q", got)
	}
	if strings.Contains((&Output{Max: 4}).Line(), " ") {
		t.Error("an empty output is not empty")
	}
}
