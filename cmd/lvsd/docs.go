package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/lvsd/lvsd/agent/clidoc"
)

// The shell completions and the man page are generated from commands and
// their flags, so they cannot drift from the binary; `make package` ships
// what the built binary prints.
func init() {
	commands["completion"] = command{usage: "print a shell completion script: completion bash|zsh|fish", run: completion,
		args: []string{"bash", "zsh", "fish"}}
	commands["man"] = command{usage: "print the lvsd(8) man page (roff); man 5 (or man lvsd.yaml): lvsd.yaml(5), the configuration files",
		run: manPage, args: []string{"8", "5", "lvsd.yaml"}}
}

// cli is the command line as clidoc documents it: the commands in order,
// each with the flag set run builds for it.
func cli() clidoc.CLI {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	c := clidoc.CLI{Version: version, DefaultConfig: defaultConfig, PathFlags: map[string]bool{"config": true, "socket": true, "out": true, "public": true}}
	for _, n := range names {
		fs := flag.NewFlagSet(n, flag.ContinueOnError)
		fs.String("config", defaultConfig, "agent configuration file")
		if setup := flagSetup[n]; setup != nil {
			setup(fs)
		}
		var flags []*flag.Flag
		fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
		c.Commands = append(c.Commands, clidoc.Command{Name: n, Usage: commands[n].usage, Flags: flags, Args: commands[n].args})
	}
	return c
}

func completion(_ context.Context, e *env) error {
	if len(e.args) != 1 {
		return fmt.Errorf("usage: lvsd completion bash|zsh|fish")
	}
	c := cli()
	switch e.args[0] {
	case "bash":
		return c.BashCompletion(e.stdout)
	case "zsh":
		return c.ZshCompletion(e.stdout)
	case "fish":
		return c.FishCompletion(e.stdout)
	}
	return fmt.Errorf("no completion for shell %q: bash, zsh or fish", e.args[0])
}

// manPage prints lvsd(8), or with "5" or "lvsd.yaml" lvsd.yaml(5), in
// man(7) roff.
func manPage(_ context.Context, e *env) error {
	switch strings.Join(e.args, " ") {
	case "", "8", "lvsd":
		return cli().ManPage(e.stdout)
	case "5", "lvsd.yaml":
		return clidoc.ConfigManPage(e.stdout, version)
	}
	return usagef("usage: lvsd man [8 | 5 | lvsd.yaml]")
}
