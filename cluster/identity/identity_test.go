package identity

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An openssl genpkey -algorithm ed25519 key, so that both kinds of file
// are pinned.
const opensslKey = `-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEILq8prSd4dA/efumdI+l3/otJUN3bdeIajeWoUyV83Xx
-----END PRIVATE KEY-----
`

func TestPrivateRoundTrip(t *testing.T) {
	k, err := Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := MarshalPrivate(k)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParsePrivate(data)
	if err != nil {
		t.Fatal(err)
	}
	if !k.Equal(back) {
		t.Fatal("the key read back differs")
	}
	if _, err := ParsePrivate([]byte(opensslKey)); err != nil {
		t.Fatalf("openssl key: %v", err)
	}
}

func TestParsePrivateRefuses(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", "no PEM block"},
		{"other type", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", `"PUBLIC KEY"`},
		{"garbage", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "not a PKCS#8"},
		{"two blocks", opensslKey + opensslKey, "more than one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePrivate([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParsePublic(t *testing.T) {
	k, _ := Generate(nil)
	pub := Public(k)
	back, err := ParsePublic(FormatPublic(pub))
	if err != nil || !pub.Equal(back) {
		t.Fatalf("round trip: %v", err)
	}
	for _, s := range []string{"", "not base64!", "AAAA"} {
		if _, err := ParsePublic(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestWriteNewRefusesToOverwrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "identity.key")
	k, _ := Generate(nil)
	if err := WriteNew(path, k); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	if err := WriteNew(path, k); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("overwrite: %v", err)
	}
}

func TestVerify(t *testing.T) {
	a, _ := Generate(nil)
	b, _ := Generate(nil)
	old, _ := Generate(nil)
	msg := []byte("heartbeat")
	signedA := (&Keys{Private: a}).Sign(append([]byte(nil), msg...))
	sigA := signedA[len(msg):]
	sigB := (&Keys{Private: b}).Sign(append([]byte(nil), msg...))[len(msg):]
	sigOld := (&Keys{Private: old}).Sign(append([]byte(nil), msg...))[len(msg):]
	enforced := &Keys{Directors: map[string][]ed25519.PublicKey{"a": {Public(a), Public(old)}, "b": {Public(b)}}}
	for _, tc := range []struct {
		name   string
		keys   *Keys
		sender string
		msg    []byte
		sig    []byte
		want   error
	}{
		{"signed by its key", enforced, "a", msg, sigA, nil},
		{"signed by its key being rotated out", enforced, "a", msg, sigOld, nil},
		{"signed by another director's key", enforced, "a", msg, sigB, BadSigned},
		{"changed after signing", enforced, "a", []byte("heartbeaT"), sigA, BadSigned},
		{"unsigned", enforced, "a", msg, nil, Unsigned},
		{"unknown name", enforced, "c", msg, sigA, Unknown},
		{"not enforced: unsigned", &Keys{}, "c", msg, nil, nil},
		{"not enforced: nil keys", nil, "c", msg, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.keys.Verify(tc.sender, tc.msg, tc.sig); !errors.Is(err, tc.want) {
				t.Fatalf("Verify: %v, want %v", err, tc.want)
			}
		})
	}
}
