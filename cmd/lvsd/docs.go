package main

import (
	"context"
	"flag"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lvsd/lvsd/agent/clidoc"
)

// The shell completions are cobra's, which ask the binary itself
// (`lvsd __complete ...`) and so complete service names from the
// configuration; the man page is generated from the same command tree. Neither
// can drift from the binary; `make package` ships what the built binary
// prints.
func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		return &cobra.Command{Use: "completion bash|zsh|fish", Short: "print a shell completion script",
			Long: "Print the completion script of a shell. The script asks lvsd itself what to complete: commands, " +
				"flags, backend actions, and the service names and backends of the --config file.",
			ValidArgs: []string{"bash", "zsh", "fish"}, Args: argCount(1, 1), RunE: action(completion)}
	}, func() *cobra.Command {
		return &cobra.Command{Use: "man [8|5|lvsd.yaml]",
			Short:     "print the lvsd(8) man page (roff); man 5 (or man lvsd.yaml): lvsd.yaml(5), the configuration files",
			ValidArgs: []string{"8", "5", "lvsd.yaml"}, Args: argCount(0, 1), RunE: action(manPage)}
	})
}

func completion(_ context.Context, e *env) error {
	root := newRoot(e.stdout, e.stderr)
	switch e.args[0] {
	case "bash":
		return root.GenBashCompletionV2(e.stdout, true)
	case "zsh":
		return root.GenZshCompletion(e.stdout)
	case "fish":
		return root.GenFishCompletion(e.stdout, true)
	}
	return usagef("no completion for shell %q: bash, zsh or fish", e.args[0])
}

// manPage prints lvsd(8), or with "5" or "lvsd.yaml" lvsd.yaml(5), in
// man(7) roff.
func manPage(_ context.Context, e *env) error {
	switch strings.Join(e.args, " ") {
	case "", "8", "lvsd":
		return cli(newRoot(e.stdout, e.stderr)).ManPage(e.stdout)
	case "5", "lvsd.yaml":
		return clidoc.ConfigManPage(e.stdout, version)
	}
	return usagef("usage: lvsd man [8 | 5 | lvsd.yaml]")
}

// cli is the command line as clidoc documents it: every command that runs
// (lvsd backend drain, not lvsd backend), in cobra's order, with its
// arguments and flags.
func cli(root *cobra.Command) clidoc.CLI {
	c := clidoc.CLI{Version: version, DefaultConfig: defaultConfig}
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			if !sub.IsAvailableCommand() {
				continue
			}
			if sub.HasAvailableSubCommands() {
				walk(sub)
				continue
			}
			name := strings.TrimPrefix(sub.CommandPath(), root.Name()+" ")
			usage := sub.Short
			if words := strings.Fields(sub.Use)[1:]; len(words) > 0 {
				usage = strings.Join(words, " ") + ": " + usage
			}
			var flags []*flag.Flag
			for _, fs := range []*pflag.FlagSet{sub.InheritedFlags(), sub.LocalFlags()} {
				fs.VisitAll(func(f *pflag.Flag) {
					if f.Name != "help" {
						flags = append(flags, &flag.Flag{Name: f.Name, Usage: f.Usage, Value: f.Value, DefValue: f.DefValue})
					}
				})
			}
			c.Commands = append(c.Commands, clidoc.Command{Name: name, Usage: usage, Flags: flags})
		}
	}
	walk(root)
	return c
}
