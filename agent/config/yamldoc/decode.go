package yamldoc

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// The decoder fills a schema's raw structs (fields tagged `yaml:"key"`,
// whole numbers also `range:"lo-hi"`) from a document's node tree and
// takes every value as written. Its rules, each the answer to a
// way YAML can change what a file means without a word:
//
//   - Keys are names (plain or quoted text). A key that YAML reads as a
//     number, a boolean or null is an error of its own; the mapping's other
//     keys are still decoded and checked.
//   - A key given twice, or one the struct does not have, is an error.
//   - A key without a value (`health:` with nothing under it), or with
//     null, is an error: it would silently mean "the default".
//   - Text keys take YAML text only: a plain scalar that YAML reads as a
//     number, a boolean, null or a date (`service: 1.0`, `node: 0x1F`) must
//     be quoted, so no tool that reads the file can take it as a number.
//     Fields of type text also take numbers, as written (`ports: [80]`).
//   - Whole numbers are plain decimal (`80`, `-5`): no float, exponent,
//     sign +, leading zero, _, 0x, 0o or 0b; each is within the range of
//     its field's `range` tag, and the message names key and range.
//   - Booleans are true or false. Decimal numbers (float64 fields) are
//     digits with an optional fraction: no .nan, .inf or exponent.
//   - Anchors, aliases, merge keys (<<) and tags (!!str) are refused:
//     lvsd's files have no use for them, and aliases let a few hundred
//     bytes stand for gigabytes.
//
// Nothing below a key the struct does not know is looked at, so the work
// is bounded by the schema's depth, not by the document's.

// Text is a field that takes any scalar as written, number or text, for
// values that are validated by their own parser afterwards (ports, HTTP
// statuses, durations).
type Text string

var (
	textType     = reflect.TypeFor[Text]()
	decimalInt   = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)
	decimalFloat = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?$`)
)

// Decode fills out, a pointer to a raw struct, from the document's root,
// leaving empty what it refuses; false when it refused anything. The
// document's root must be a mapping: otherwise nothing is worth validating.
func (d *Doc) Decode(out any) bool {
	before := len(*d.errs)
	d.undecoded = map[*yaml.Node]bool{}
	d.value(d.root, reflect.ValueOf(out).Elem(), "", "")
	if d.root.Kind != yaml.MappingNode {
		d.undecoded[d.root] = true
	}
	return len(*d.errs) == before
}

// value decodes n into v. key names the value in messages; rng is the
// field's range tag, for whole numbers.
func (d *Doc) value(n *yaml.Node, v reflect.Value, key, rng string) {
	if !d.plain(n, key) {
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		d.at(n, "%s has no value: give it one, or leave the key out", keyOrThis(key))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		d.value(n, p.Elem(), key, rng)
		v.Set(p)
	case reflect.Struct:
		if d.want(n, yaml.MappingNode, key) {
			d.mapping(n, v)
		}
	case reflect.Slice:
		if d.want(n, yaml.SequenceNode, key) {
			s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
			for i, item := range n.Content {
				if d.full() {
					break
				}
				d.value(item, s.Index(i), fmt.Sprintf("%s[%d]", key, i), rng)
			}
			v.Set(s)
		}
	case reflect.String:
		if d.want(n, yaml.ScalarNode, key) {
			d.text(n, v, key)
		}
	case reflect.Int:
		if d.want(n, yaml.ScalarNode, key) {
			d.integer(n, v, key, rng)
		}
	case reflect.Float64:
		if d.want(n, yaml.ScalarNode, key) {
			d.decimal(n, v, key)
		}
	case reflect.Bool:
		if d.want(n, yaml.ScalarNode, key) {
			if n.Tag != "!!bool" {
				d.at(n, "%swant true or false, not %s", keyPrefix(key), shown(n))
				return
			}
			v.SetBool(strings.EqualFold(n.Value, "true"))
		}
	case reflect.Map: // string keys (names), free-form: per_director
		if d.want(n, yaml.MappingNode, key) {
			m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
			for i := 0; i+1 < len(n.Content) && !d.full(); i += 2 {
				k := n.Content[i]
				if k.Kind != yaml.ScalarNode || k.Tag != "!!str" && k.Tag != "!!int" {
					d.at(k, "%sa key here is a name, not %s", keyPrefix(key), shown(k))
					continue
				}
				e := reflect.New(v.Type().Elem()).Elem()
				d.value(n.Content[i+1], e, key+"."+k.Value, rng)
				m.SetMapIndex(reflect.ValueOf(k.Value), e)
			}
			v.Set(m)
		}
	default:
		panic("yamldoc: no decoding for " + v.Type().String())
	}
}

// plain refuses what lvsd's files have no use for: anchors, aliases and
// explicit tags.
func (d *Doc) plain(n *yaml.Node, key string) bool {
	switch {
	case n.Kind == yaml.AliasNode:
		d.at(n, "%san alias (*%s) is not allowed: write the value out", keyPrefix(key), visible(n.Value))
	case n.Anchor != "":
		d.at(n, "%san anchor (&%s) is not allowed: lvsd's files take no anchors or aliases", keyPrefix(key), visible(n.Anchor))
	case n.Style&yaml.TaggedStyle != 0:
		d.at(n, "%sa tag (%s) is not allowed: quote a value to make it text", keyPrefix(key), visible(n.Tag))
	default:
		return true
	}
	return false
}

// want checks that n is of the kind a field needs.
func (d *Doc) want(n *yaml.Node, kind yaml.Kind, key string) bool {
	if n.Kind == kind {
		return true
	}
	switch kind {
	case yaml.MappingNode:
		d.at(n, "%swant a mapping (key: value lines, or {key: value}), not %s", keyPrefix(key), shown(n))
	case yaml.SequenceNode:
		d.at(n, "%swant a list ([a, b], or one \"- item\" line each), not %s", keyPrefix(key), shown(n))
	default:
		d.at(n, "%swant a single value, not %s", keyPrefix(key), shown(n))
	}
	return false
}

// mapping decodes a mapping into the struct v by the fields' yaml tags.
func (d *Doc) mapping(n *yaml.Node, v reflect.Value) {
	t := v.Type()
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content) && !d.full(); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if !d.plain(k, "") {
			continue
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			if k.Tag == "!!merge" {
				d.at(k, "a merge key (<<) is not allowed: write the keys out")
			} else {
				d.at(k, "key %s is not a name: keys are words like %s", shown(k), fieldNames(t)[0])
			}
			continue
		}
		if prev, ok := seen[k.Value]; ok {
			d.at(k, "key %q is given twice (first at line %d)", k.Value, d.line+prev.Line)
			continue
		}
		seen[k.Value] = k
		f, ok := fieldByKey(t, k.Value)
		if !ok {
			d.at(k, "unknown key %q (%s)", k.Value, suggestKey(k.Value, fieldNames(t)))
			continue
		}
		d.value(val, v.FieldByIndex(f.Index), k.Value, f.Tag.Get("range"))
	}
}

func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); strings.Split(f.Tag.Get("yaml"), ",")[0] == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func fieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if k := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]; k != "" {
			out = append(out, k)
		}
	}
	return out
}

// suggestKey names the key meant, when one is a typo away, else lists the
// keys allowed.
func suggestKey(k string, keys []string) Verbatim {
	for _, c := range keys {
		// Two edits (a swap of letters) at most, and few for the length:
		// "a4" is no typo of "nat".
		if dist := editDistance(strings.ToLower(k), c); dist <= 2 && 3*dist <= min(len(k), len(c)) {
			return Verbatim(fmt.Sprintf("did you mean %s?", c))
		}
	}
	return Verbatim("keys here: " + strings.Join(keys, ", "))
}

// editDistance is the Levenshtein distance, for short keys.
func editDistance(a, b string) int {
	if len(a) > 64 {
		return len(a)
	}
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// text decodes a string field: YAML text, or for type text any scalar as
// written.
func (d *Doc) text(n *yaml.Node, v reflect.Value, key string) {
	switch {
	case n.Tag != "!!str" && v.Type() != textType:
		d.at(n, "%s%s is %s, not text: write \"%s\" in quotes if you mean the text", keyPrefix(key), visible(n.Value), scalarKind(n), visible(n.Value))
		return
	case n.Value == "":
		d.at(n, "%s is empty: give it a value, or leave the key out", keyOrThis(key))
		return
	}
	v.SetString(n.Value)
}

// integer decodes a whole number within the range tag rng ("lo-hi",
// either end may be negative).
func (d *Doc) integer(n *yaml.Node, v reflect.Value, key, rng string) {
	lo, hi := parseRange(rng)
	switch {
	case n.Tag != "!!int" && n.Tag != "!!float":
		d.at(n, "%swant a whole number (%d-%d), not %s", keyPrefix(key), lo, hi, shown(n))
		return
	case !decimalInt.MatchString(n.Value):
		if n.Tag == "!!float" && decimalFloat.MatchString(n.Value) {
			d.at(n, "%s%s is not a whole number (%d-%d)", keyPrefix(key), n.Value, lo, hi)
		} else {
			d.at(n, "%s%s is not written as a plain decimal number: write whole numbers like 80 or -5 (no 0x, 0o, 0b, leading 0, +, _ or exponent)", keyPrefix(key), n.Value)
		}
		return
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || i < lo || i > hi {
		d.at(n, "%s %s is not in %d-%d", key, n.Value, lo, hi)
		return
	}
	v.SetInt(i)
}

// decimal decodes a decimal number such as 0.5.
func (d *Doc) decimal(n *yaml.Node, v reflect.Value, key string) {
	if (n.Tag != "!!int" && n.Tag != "!!float") || !decimalFloat.MatchString(n.Value) {
		d.at(n, "%s%s is not a decimal number like 0.5", keyPrefix(key), shown(n))
		return
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil {
		d.at(n, "%s%s is not a decimal number like 0.5", keyPrefix(key), shown(n))
		return
	}
	v.SetFloat(f)
}

// parseRange reads a range tag; a schema without one is a bug (CheckSchema
// finds it in a test).
func parseRange(rng string) (int64, int64) {
	lo, hi, ok := rangeTag(rng)
	if !ok {
		panic("yamldoc: bad range tag " + strconv.Quote(rng))
	}
	return lo, hi
}

func rangeTag(rng string) (lo, hi int64, ok bool) {
	if i := strings.Index(rng[min(1, len(rng)):], "-"); i >= 0 && rng != "" {
		lo, err1 := strconv.ParseInt(rng[:i+1], 10, 64)
		hi, err2 := strconv.ParseInt(rng[i+2:], 10, 64)
		if err1 == nil && err2 == nil {
			return lo, hi, true
		}
	}
	return 0, 0, false
}

func keyOrThis(key string) string {
	if key == "" {
		return "this"
	}
	return key
}

func keyPrefix(key string) string {
	if key == "" {
		return ""
	}
	return key + ": "
}

// scalarKind names what YAML reads a plain scalar as.
func scalarKind(n *yaml.Node) string {
	switch n.Tag {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	case "!!timestamp":
		return "a date"
	}
	return "text"
}

// shown describes a node for a message: a scalar as written (cut), else
// its kind.
func shown(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!str" {
			return strconv.Quote(Cut(n.Value))
		}
		return visible(Cut(n.Value))
	}
	return "this"
}

// visible is s as written, or quoted when it holds characters that are
// not printable (a tag's %0A is a line feed).
func visible(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// full reports whether the load has found MaxProblems: the decoder then
// stops, so that a document of a million bad keys costs no more than one
// of two hundred.
func (d *Doc) full() bool { return len(*d.errs) >= MaxProblems }

// at records a problem at node n, which the decoder refuses.
func (d *Doc) at(n *yaml.Node, format string, args ...any) {
	d.undecoded[n] = true
	if d.full() {
		return
	}
	*d.errs = append(*d.errs, &Error{File: d.File, Line: d.line + n.Line, Col: n.Column,
		Msg: d.Prefix + fmt.Sprintf(format, shorten(args)...)})
}

// CheckSchema reports every whole-number field of schema, a raw struct
// type (followed through pointers, slices and the structs it holds),
// whose range tag Decode cannot read: Decode would panic on the first
// file that sets it.
func CheckSchema(schema reflect.Type) error {
	var bad []string
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Int {
				if lo, hi, ok := rangeTag(f.Tag.Get("range")); !ok || lo > hi {
					bad = append(bad, fmt.Sprintf("%s.%s: range tag %q", path, f.Name, f.Tag.Get("range")))
				}
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	walk(schema, schema.Name())
	if len(bad) > 0 {
		return fmt.Errorf("yamldoc: %s", strings.Join(bad, "; "))
	}
	return nil
}
