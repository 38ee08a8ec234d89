// Package clidoc writes lvsd's man pages: lvsd(8) from its table of
// commands and their flags, lvsd.yaml(5) from docs/configuration.md turned
// into roff. Generated from the table, they cannot drift from the binary;
// `make package` ships what the built binary prints. (The shell completions
// are the command line's own: cmd/lvsd.)
package clidoc

import "flag"

// CLI is the command line documented.
type CLI struct {
	Version       string
	DefaultConfig string    // of --config, which every command takes
	Commands      []Command // in the order shown
}

// Command is one subcommand.
type Command struct {
	Name  string
	Usage string       // one line: arguments and what it does
	Flags []*flag.Flag // as the command parses them, --config included
}

// takesValue: every lvsd flag but the booleans takes a value.
func takesValue(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}
