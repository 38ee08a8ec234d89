// Package yamldoc turns a YAML file into strictly decoded documents whose
// every problem names the file, line and column it is about. It knows no
// schema: a caller hands Decode its raw structs (yaml and range tags) and
// validates the values itself with Errorf, which places a message at a
// path such as "$.backends[1].weight".
//
// Reading is bounded in work whatever the file holds: the text is checked
// and cut into documents (yaml.go), each parsed by go.yaml.in/yaml/v3,
// which never expands aliases; a document that does not parse is reported
// at the offending token (syntax.go); the decoder refuses anchors,
// aliases, tags, unknown and duplicate keys and values YAML would read
// differently from how they look (decode.go); and loading stops at
// MaxProblems.
package yamldoc
