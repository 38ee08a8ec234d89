package config

import (
	"fmt"
	"reflect"
	"testing"
)

// parseOne reads the one service of a file's text.
func parseOne(t *testing.T, file, text string) *Service {
	t.Helper()
	var errs List
	got := ParseServices(file, []byte(text), &errs, false)
	if len(errs) > 0 || len(got) != 1 {
		t.Fatalf("%d services, errors: %v", len(got), errs)
	}
	return &got[0]
}

// What the operator writes differently but means the same keeps the
// digest; what changes the kernel tables or the checks changes it.
func TestServiceDigest(t *testing.T) {
	const base = "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\n"
	want := parseOne(t, "/etc/lvsd/services/web.yaml", base).Digest()
	for _, tc := range []struct {
		name, text string
		same       bool
	}{
		{"a comment", "# the web tier\n" + base, true},
		{"keys reordered", "vip: 10.0.0.50\nservice: web\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\nports: [80]\n", true},
		{"backends reordered", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.12}\n  - {address: 10.0.0.11}\n", true},
		{"a default written out", base + "forwarding: dr\n", true},
		{"the interface of this host", base + "interface: eth0.20\n", true},
		{"a backend added", base + "  - {address: 10.0.0.13}\n", false},
		{"a weight", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11, weight: 2}\n  - {address: 10.0.0.12}\n", false},
		{"another port", "service: web\nvip: 10.0.0.50\nports: [81]\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\n", false},
		{"a scheduler", base + "scheduler: wlc\n", false},
		{"a health check", base + "health:\n  checks:\n    - {type: tcp}\n", false},
		{"another name", "service: www\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.12}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseOne(t, "/srv/other/place.yaml", tc.text).Digest()
			if (got == want) != tc.same {
				t.Errorf("digest %x, base %x: same = %v, want %v", got, want, got == want, tc.same)
			}
		})
	}
}

// The services of a release before a new field keep their digests: a zero
// field is left out, so a director of either release shows no difference.
func TestServiceDigestZeroFieldsLeftOut(t *testing.T) {
	s := parseOne(t, "a.yaml", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11}\n")
	before := s.Digest()
	s.Persistence = Persistence{} // already zero: the encoding has no trace of it
	s.Announce = nil
	if s.Digest() != before {
		t.Fatal("a zero field changed the digest")
	}
}

// TestDigestKinds: every field reachable from Service is of a kind the
// digest encodes, so no field is silently reduced to its type's name.
func TestDigestKinds(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		if seen[ty] || ty.Implements(textMarshaler) {
			return
		}
		seen[ty] = true
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(ty.Elem(), path+"[]")
		case reflect.Map:
			walk(ty.Key(), path+"{key}")
			walk(ty.Elem(), path+"{}")
		case reflect.Struct:
			for i := range ty.NumField() {
				if f := ty.Field(i); f.IsExported() && !digestSkipped[ty][f.Name] {
					walk(f.Type, path+"."+f.Name)
				}
			}
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		default:
			t.Errorf("Service%s is a %s, which the digest does not encode", path, ty)
		}
	}
	walk(reflect.TypeFor[Service](), "")
}

func BenchmarkServiceDigest(b *testing.B) {
	var errs List
	text := "service: web\nvip: 10.0.0.50\nports: [80]\nhealth:\n  checks:\n    - {type: http, path: /health}\nbackends:\n"
	for i := range 10 {
		text += fmt.Sprintf("  - {address: 10.0.0.%d}\n", 11+i)
	}
	s := ParseServices("a.yaml", []byte(text), &errs, false)
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	for b.Loop() {
		s[0].Digest()
	}
}
