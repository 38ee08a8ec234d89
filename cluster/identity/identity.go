// Package identity is a director's own signing key and the public keys of
// the directors of its cluster (cluster.directors): every heartbeat and
// relay message a director sends is signed with its key, and a receiver
// that knows the directors takes a message only if it is signed by a key
// listed under the name the message carries. The cluster key (memberlist
// encryption) only says that a message comes from some key holder; this
// says which director.
//
// Keys are Ed25519. A private key file is PEM "PRIVATE KEY" (PKCS#8), as
// `openssl genpkey -algorithm ed25519` writes it; a public key is written
// as the standard base64 of its 32 raw bytes, one line.
package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// SignatureSize is the length of a signature: what signing costs a message.
const SignatureSize = ed25519.SignatureSize

// Generate returns a new private key, from rand (crypto/rand when nil).
func Generate(r io.Reader) (ed25519.PrivateKey, error) {
	if r == nil {
		r = rand.Reader
	}
	_, priv, err := ed25519.GenerateKey(r)
	return priv, err
}

// MarshalPrivate encodes key as a PEM PKCS#8 "PRIVATE KEY" block.
func MarshalPrivate(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivate decodes a PEM PKCS#8 Ed25519 private key.
func ParsePrivate(data []byte) (ed25519.PrivateKey, error) {
	block, rest := pem.Decode(data)
	switch {
	case block == nil:
		return nil, errors.New("holds no PEM block (want a \"PRIVATE KEY\", as `lvsd keygen` or `openssl genpkey -algorithm ed25519` write)")
	case block.Type != "PRIVATE KEY":
		return nil, fmt.Errorf("holds a PEM %q block, want \"PRIVATE KEY\" (PKCS#8 Ed25519)", block.Type)
	case strings.TrimSpace(string(rest)) != "":
		return nil, errors.New("holds more than one PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("is not a PKCS#8 private key: %v", err)
	}
	ed, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("holds a %T, want an Ed25519 key", k)
	}
	return ed, nil
}

// Public returns key's public key.
func Public(key ed25519.PrivateKey) ed25519.PublicKey { return key.Public().(ed25519.PublicKey) }

// FormatPublic writes a public key as cluster.directors lists it.
func FormatPublic(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }

// ParsePublic reads a public key as FormatPublic writes it.
func ParsePublic(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("public key %q is not standard base64", s)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key %q has %d bytes, want %d (Ed25519)", s, len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// WriteNew writes key to a new file at path, mode 0600; it never replaces
// an existing file (a director's identity is lost when overwritten).
func WriteNew(path string, key ed25519.PrivateKey) error {
	data, err := MarshalPrivate(key)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists already: a director's identity is not replaced (remove the file first to make a new one)", path)
		}
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// Keys is what a director signs with and whom it believes. It is never
// modified once built, so it may be shared between goroutines.
type Keys struct {
	// Private signs this director's messages; nil: they go unsigned.
	Private ed25519.PrivateKey
	// Directors lists, per node name, the public keys its messages may be
	// signed with (more than one while a director's key is rotated). nil:
	// identities are not enforced, and any message is taken as before.
	Directors map[string][]ed25519.PublicKey
}

// Enforced reports whether every message must be signed by its sender.
func (k *Keys) Enforced() bool { return k != nil && k.Directors != nil }

// Signs reports whether this director signs what it sends.
func (k *Keys) Signs() bool { return k != nil && k.Private != nil }

// Sign appends the signature of msg to msg.
func (k *Keys) Sign(msg []byte) []byte {
	return append(msg, ed25519.Sign(k.Private, msg)...)
}

// Refusal says why a message does not prove its sender; its String is a
// stable key for counting and logging.
type Refusal string

// Refusals.
const (
	Unsigned  Refusal = "unsigned"     // identities are enforced and the message has no signature
	Unknown   Refusal = "unknown name" // the name is not in cluster.directors
	BadSigned Refusal = "bad signature"
)

func (r Refusal) Error() string { return string(r) }

// Verify checks that sig over signed was made by a key listed for name.
// sig nil means the message was not signed. Without Directors everything
// passes: there is no one to check against.
func (k *Keys) Verify(name string, signed, sig []byte) error {
	if !k.Enforced() {
		return nil
	}
	keys, ok := k.Directors[name]
	switch {
	case !ok:
		return Unknown
	case sig == nil:
		return Unsigned
	}
	for _, pub := range keys {
		if ed25519.Verify(pub, signed, sig) {
			return nil
		}
	}
	return BadSigned
}
