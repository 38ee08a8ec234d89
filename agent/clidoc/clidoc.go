// Package clidoc writes lvsd's command-line documentation from its table
// of commands and their flags: the lvsd(8) man page, the lvsd.yaml(5) man
// page (docs/configuration.md turned into roff) and the bash, zsh and fish
// completion scripts. Generated from the table, they cannot drift from the
// binary; `make package` ships what the built binary prints.
package clidoc

import "flag"

// CLI is the command line documented.
type CLI struct {
	Version       string
	DefaultConfig string    // of --config, which every command takes
	Commands      []Command // in the order shown
	// PathFlags are the flags whose value is a file's path, which the
	// shells complete; the other values (a number, service names) they
	// leave to the user.
	PathFlags map[string]bool
}

// Command is one subcommand.
type Command struct {
	Name  string
	Usage string       // one line: arguments and what it does
	Flags []*flag.Flag // as the command parses them, --config included
	Args  []string     // the words it takes besides flags
}

// takesValue: every lvsd flag but the booleans takes a value.
func takesValue(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}
