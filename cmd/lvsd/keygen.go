package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/cluster/identity"
)

// defaultIdentity is where keygen writes, the identity_file default.
const defaultIdentity = config.DefaultIdentityFile

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		c := &cobra.Command{Use: "keygen", Short: "write a new director identity (--out FILE, default " + defaultIdentity +
			") and print its public key; --public FILE prints the public key of an existing one",
			Args: argCount(0, 0), ValidArgsFunction: cobra.NoFileCompletions, RunE: action(keygen)}
		c.Flags().String("out", defaultIdentity, "write the new private key to this file (mode 0600; an existing file is never replaced)")
		c.Flags().String("public", "", "print the public key of this private key file instead of making one")
		return c
	})
}

// keygen makes a director's identity: an Ed25519 key whose public half goes
// under the director's node name in every director's cluster.directors.
func keygen(_ context.Context, e *env) error {
	if path := e.value("public"); path != "" {
		key, err := config.ReadIdentityFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, identity.FormatPublic(identity.Public(key)))
		return nil
	}
	out := e.value("out")
	key, err := identity.Generate(nil)
	if err != nil {
		return err
	}
	if err := identity.WriteNew(out, key); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, identity.FormatPublic(identity.Public(key)))
	return nil
}
