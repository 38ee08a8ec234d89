package yamldoc

import (
	"reflect"
	"strings"
	"testing"
)

// rawTest is a schema of every kind of field Decode fills.
type rawTest struct {
	Name    string              `yaml:"name"`
	Weight  int                 `yaml:"weight" range:"0-65535"`
	Nice    *int                `yaml:"nice" range:"-20-19"`
	Ratio   float64             `yaml:"ratio"`
	Enabled *bool               `yaml:"enabled"`
	Ports   []Text              `yaml:"ports"`
	Inner   *rawInner           `yaml:"inner"`
	Per     map[string][]string `yaml:"per"`
}

type rawInner struct {
	Address string `yaml:"address"`
	Weight  int    `yaml:"weight" range:"0-65535"`
}

// Decode takes every value as written, or says why not, at the value.
func TestDecode(t *testing.T) {
	const wholeNumber = "write whole numbers like 80 or -5 (no 0x, 0o, 0b, leading 0, +, _ or exponent)"
	for _, c := range []struct{ name, body, want string }{
		{"all kinds", "name: web\nweight: 5\nnice: -20\nratio: 0.5\nenabled: False\nports: [80, \"8000-8009\", all]\ninner: {address: a, weight: 0}\nper: {d1: [a], 2: [b]}\n", ""},
		// Keys.
		{"number key", "1: x\nweight: 70000\n", "svc.yaml:1:1: key 1 is not a name: keys are words like name\nsvc.yaml:2:9: weight 70000 is not in 0-65535"},
		{"duplicate key", "name: a\nname: b\n", "svc.yaml:2:1: key \"name\" is given twice (first at line 1)"},
		{"unknown key", "colour: red\n", "svc.yaml:1:1: unknown key \"colour\" (keys here: name, weight, nice, ratio, enabled, ports, inner, per)"},
		{"typo key", "inner: {adress: a}\n", "svc.yaml:1:9: unknown key \"adress\" (did you mean address?)"},
		{"no typo of a short key", "inner: {a4: a}\n", "svc.yaml:1:9: unknown key \"a4\" (keys here: address, weight)"},
		{"map key", "per: {[a]: [b]}\n", "svc.yaml:1:7: per: a key here is a name, not a list"},
		// Numbers.
		{"float in integer", "weight: 0.5\n", "svc.yaml:1:9: weight: 0.5 is not a whole number (0-65535)"},
		{"hex", "weight: 0x50\n", "svc.yaml:1:9: weight: 0x50 is not written as a plain decimal number: " + wholeNumber},
		{"too big for a float", "weight: 1e309\n", "svc.yaml:1:9: weight: want a whole number (0-65535), not \"1e309\""},
		{"out of a negative range", "nice: -21\n", "svc.yaml:1:7: nice -21 is not in -20-19"},
		{"decimal", "ratio: .nan\n", "svc.yaml:1:8: ratio: .nan is not a decimal number like 0.5"},
		// Text and booleans.
		{"number for text", "name: 1.0\n", "svc.yaml:1:7: name: 1.0 is a number, not text: write \"1.0\" in quotes if you mean the text"},
		{"date", "name: 2026-01-02\n", "svc.yaml:1:7: name: 2026-01-02 is a date, not text: write \"2026-01-02\" in quotes if you mean the text"},
		{"empty text", "name: \"\"\n", "svc.yaml:1:7: name is empty: give it a value, or leave the key out"},
		{"null", "weight: ~\n", "svc.yaml:1:9: weight has no value: give it one, or leave the key out"},
		{"key without value", "inner:\n", "svc.yaml:1:7: inner has no value: give it one, or leave the key out"},
		{"boolean", "enabled: yes\n", "svc.yaml:1:10: enabled: want true or false, not \"yes\""},
		// Shapes.
		{"mapping for a list", "ports: {a: 1}\n", "svc.yaml:1:8: ports: want a list ([a, b], or one \"- item\" line each), not a mapping"},
		{"mapping as a value", "ports: [{a: 1}]\n", "svc.yaml:1:9: ports[0]: want a single value, not a mapping"},
		{"list document", "- a\n- b\n", "svc.yaml:1:1: want a mapping (key: value lines, or {key: value}), not a list"},
		// No anchors, aliases, merge keys or tags.
		{"anchor and alias", "inner: &b {}\nname: *b\n", "svc.yaml:1:8: inner: an anchor (&b) is not allowed: lvsd's files take no anchors or aliases\nsvc.yaml:2:7: name: an alias (*b) is not allowed: write the value out"},
		{"merge key", "<<: {name: a}\n", "svc.yaml:1:1: a merge key (<<) is not allowed: write the keys out"},
		{"tag", "name: !!str a\n", "svc.yaml:1:7: name: a tag (!!str) is not allowed: quote a value to make it text"},
		// Values in messages are cut.
		{"long value", "weight: " + strings.Repeat("x", 5000) + "\n", "svc.yaml:1:9: weight: want a whole number (0-65535), not \"" + strings.Repeat("x", 63) + "…"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := problems(c.body, true); got != c.want {
				t.Errorf("got\n  %s\nwant\n  %s", strings.ReplaceAll(got, "\n", "\n  "), strings.ReplaceAll(c.want, "\n", "\n  "))
			}
		})
	}
}

// After Decode, Errorf places a caller's message at a path, or the nearest
// parent there, and keeps quiet about what Decode already refused.
func TestErrorfAfterDecode(t *testing.T) {
	var errs List
	Each("f.yaml", []byte("name: web\ninner:\n  address: a\nweight: x\n"), &errs, func(d *Doc) {
		d.Prefix = "service \"" + d.TextAt("$.name") + "\": "
		var raw rawTest
		if d.Decode(&raw) {
			t.Error("Decode refused nothing")
		}
		d.Errorf("$.inner.address", "address %q is wrong", raw.Inner.Address)
		d.Errorf("$.inner.weight", "not said: absent, and Decode refused a value")
		d.Errorf("$.weight", "not said: Decode refused it")
		if line, col := d.Position("$.inner"); line != 3 || col != 3 {
			t.Errorf("inner at %d:%d", line, col)
		}
	})
	want := "f.yaml:4:9: service \"web\": weight: want a whole number (0-65535), not \"x\"\nf.yaml:3:12: address \"a\" is wrong"
	if got := errs.Error(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// A document of a million bad keys costs no more than one of MaxProblems.
func TestProblemsCapped(t *testing.T) {
	var errs List
	Each("f.yaml", []byte(strings.Repeat("x: 1\n", 10_000)+"---\nname: a\n"), &errs, func(d *Doc) { d.Decode(&rawTest{}) })
	if len(errs) != MaxProblems+1 || errs[MaxProblems].Error() != "f.yaml: checking stopped after 200 problems" {
		t.Errorf("%d problems, the last %v", len(errs), errs[len(errs)-1])
	}
	// Syntax errors, which no document's check counts, stop the file at
	// the next document.
	var syntax List
	Each("f.yaml", []byte(strings.Repeat("[\n---\n", 300)), &syntax, func(*Doc) {})
	if len(syntax) != MaxProblems+1 || syntax[MaxProblems].Error() != "f.yaml:400:1: not checked from here on: more than 200 problems already" {
		t.Errorf("%d problems, the last %v", len(syntax), syntax[len(syntax)-1])
	}
	lines := strings.Split(errs.Error(), "\n")
	if len(lines) != maxShown+1 || lines[maxShown] != "... and 151 more problems" {
		t.Errorf("%d lines, ending %q", len(lines), lines[len(lines)-1])
	}
}

func TestCheckSchema(t *testing.T) {
	if err := CheckSchema(reflect.TypeFor[rawTest]()); err != nil {
		t.Error(err)
	}
	type bad struct {
		Inner []*struct {
			N int `yaml:"n" range:"5-1"`
		} `yaml:"inner"`
		M int `yaml:"m"`
	}
	err := CheckSchema(reflect.TypeFor[bad]())
	if err == nil || err.Error() != `yamldoc: bad.Inner.N: range tag "5-1"; bad.M: range tag ""` {
		t.Errorf("got %v", err)
	}
}

func TestSuggestKey(t *testing.T) {
	keys := []string{"address", "weight", "nat"}
	for k, want := range map[string]string{
		"wieght": "did you mean weight?", "Address": "did you mean address?",
		"a4": "keys here: address, weight, nat", "colour": "keys here: address, weight, nat",
	} {
		if got := suggestKey(k, keys); string(got) != want {
			t.Errorf("%s: got %q, want %q", k, got, want)
		}
	}
}
