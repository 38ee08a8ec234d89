package config

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lvsd/lvsd/cluster/identity"
)

// clusterIdentity reads this director's identity_file and checks the
// directors map against it: with directors set, this director must be
// listed under its node name with its own public key, or every peer
// would refuse its messages.
func (d *doc) clusterIdentity(c *Cluster, raw *rawCluster, file, node string) {
	c.IdentityFile = relativeTo(file, orDefault(raw.IdentityFile, DefaultIdentityFile))
	key, err := ReadIdentityFile(c.IdentityFile)
	switch {
	case errors.Is(err, fs.ErrNotExist) && raw.IdentityFile == "" && raw.Directors == nil:
		// The default file is optional until identities are enforced.
	case errors.Is(err, fs.ErrNotExist):
		d.Errorf(identityPath(raw), "cluster identity_file %s does not exist: create it with `lvsd keygen --out %s`", c.IdentityFile, c.IdentityFile)
	case err != nil:
		d.Errorf(identityPath(raw), "%v", err)
	default:
		c.Identity = key
	}
	if raw.Directors == nil {
		return
	}
	c.Directors = map[string][]ed25519.PublicKey{}
	for _, name := range slices.Sorted(maps.Keys(raw.Directors)) {
		path := "$.cluster.directors." + name
		if problem := nodeNameProblem(name); problem != "" {
			d.Errorf(path, "directors: node name %q %s", name, problem)
			continue
		}
		fields := strings.Fields(raw.Directors[name])
		if len(fields) == 0 {
			d.Errorf(path, "directors: %s has no public key (the line `lvsd keygen` prints; two, space-separated, while rotating)", name)
		}
		for _, f := range fields {
			pub, err := identity.ParsePublic(f)
			if err != nil {
				d.Errorf(path, "directors: %s: %v", name, err)
				continue
			}
			c.Directors[name] = append(c.Directors[name], pub)
		}
	}
	if len(raw.Directors) == 0 {
		d.Errorf("$.cluster.directors", "directors is empty: list every director's node name with its public key (`lvsd keygen --public FILE` prints it), or leave directors out")
		return
	}
	keys := c.Directors[node]
	_, listed := raw.Directors[node]
	switch {
	case c.Identity == nil:
		// Its absence is reported above.
	case !listed:
		d.Errorf("$.cluster.directors", "directors does not list this director (node %q): add `%s: %s`, the public key of %s",
			node, node, identity.FormatPublic(identity.Public(c.Identity)), c.IdentityFile)
	case !slices.ContainsFunc(keys, func(k ed25519.PublicKey) bool { return k.Equal(identity.Public(c.Identity)) }) && len(keys) > 0:
		d.Errorf("$.cluster.directors."+node, "directors: the key listed for this director (node %q) is not the public key of %s, which is %s",
			node, c.IdentityFile, identity.FormatPublic(identity.Public(c.Identity)))
	}
}

// identityPath is where an identity_file problem is shown: at the key
// when given, else at the cluster block.
func identityPath(raw *rawCluster) string {
	if raw.IdentityFile != "" {
		return "$.cluster.identity_file"
	}
	return "$.cluster"
}

// nodeNameProblem says what is wrong with a node name as the cluster's
// messages carry it, or "" when nothing is.
func nodeNameProblem(name string) string {
	switch {
	case name == "" || len(name) > maxNodeName:
		return fmt.Sprintf("must have 1-%d bytes", maxNodeName)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl):
		return "is not printable UTF-8"
	}
	return ""
}

// ReadIdentityFile reads a director's private key. Like the cluster key
// file it must be private to the account lvsd runs as: whoever reads it
// can speak for this director. An error wraps fs.ErrNotExist when the
// file does not exist.
func ReadIdentityFile(path string) (ed25519.PrivateKey, error) {
	data, err := readChecked(path, private)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || err.Error() == "does not exist" {
			return nil, fmt.Errorf("cluster identity_file %s does not exist: %w", path, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("cluster identity_file %s %v", path, err)
	}
	key, err := identity.ParsePrivate(data)
	if err != nil {
		return nil, fmt.Errorf("cluster identity_file %s %v", path, err)
	}
	return key, nil
}

// Warnings are what `lvsd check` should tell about c that is valid but
// weaker than it could be.
func (c *Cluster) Warnings() []string {
	// Mode vrrp has no cluster key to speak with (keepalived's VRRPv3
	// authenticates nothing), so identities have nothing to strengthen.
	if c == nil || c.Insecure || c.Directors != nil || c.Mode == ModeVRRP {
		return nil
	}
	return []string{"cluster.directors is not set: any holder of the cluster key can speak for any director " +
		"(take its VIPs, vote, inject connections); see docs/cluster.md, Identities"}
}
