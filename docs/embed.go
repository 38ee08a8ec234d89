// Package docs is lvsd's operator documentation. The configuration
// reference is compiled into the binary, which prints it as the
// lvsd.yaml(5) man page (lvsd man 5): one source for both.
package docs

import _ "embed"

// Configuration is configuration.md, the reference of the agent file and
// the service files.
//
//go:embed configuration.md
var Configuration string
