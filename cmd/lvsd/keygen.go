package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/cluster/identity"
)

// defaultIdentity is where keygen writes, the identity_file default.
const defaultIdentity = config.DefaultIdentityFile

func init() {
	commands["keygen"] = command{usage: "write a new director identity (--out FILE, default " + defaultIdentity +
		") and print its public key; --public FILE prints the public key of an existing one", run: keygen}
	flagSetup["keygen"] = func(fs *flag.FlagSet) {
		fs.String("out", defaultIdentity, "write the new private key to this file (mode 0600; an existing file is never replaced)")
		fs.String("public", "", "print the public key of this private key file instead of making one")
	}
}

// keygen makes a director's identity: an Ed25519 key whose public half goes
// under the director's node name in every director's cluster.directors.
func keygen(_ context.Context, e *env) error {
	if len(e.args) != 0 {
		return usagef("usage: lvsd keygen [--out FILE] | lvsd keygen --public FILE")
	}
	if path := e.flags.Lookup("public").Value.String(); path != "" {
		key, err := config.ReadIdentityFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, identity.FormatPublic(identity.Public(key)))
		return nil
	}
	out := e.flags.Lookup("out").Value.String()
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
