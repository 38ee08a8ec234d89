package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os/user"
	"strconv"
	"strings"
	"testing"
	"time"
)

func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, DNSNames: []string{"backend.example"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// An https check verifies certificates only when told to: verify: true,
// or a ca_file or server_name (which would mean nothing without it).
func TestCheckTLS(t *testing.T) {
	dir := t.TempDir()
	ca := selfSignedPEM(t)
	writeFile(t, dir, "ca.pem", string(ca))
	writeFile(t, dir, "junk.pem", "not a certificate\n")
	check := func(tls string) string {
		return svcGood + "health: {checks: [{type: https, port: 443" + tls + "}]}\n"
	}
	for _, c := range []struct {
		name, tls string
		want      TLS
	}{
		{"default", "", TLS{}},
		{"verify with system roots", ", tls: {verify: true}", TLS{Verify: true}},
		{"ca_file", ", tls: {ca_file: ca.pem}", TLS{Verify: true, CAFile: dir + "/ca.pem", RootCAs: ca}},
		{"server_name", ", tls: {server_name: backend.example}", TLS{Verify: true, ServerName: "backend.example"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			svcs, err := loadServiceFiles(writeFile(t, dir, "svc.yaml", check(c.tls)))
			if err != nil {
				t.Fatal(err)
			}
			got := svcs[0].Health.Checks[0].TLS
			if got.Verify != c.want.Verify || got.CAFile != c.want.CAFile || string(got.RootCAs) != string(c.want.RootCAs) || got.ServerName != c.want.ServerName {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
	for _, c := range []struct{ name, tls, want string }{
		{"missing ca_file", ", tls: {ca_file: nope.pem}", "svc.yaml:5:59: service \"web\": ca_file DIR/nope.pem does not exist"},
		{"not PEM", ", tls: {ca_file: junk.pem}", "svc.yaml:5:59: service \"web\": ca_file DIR/junk.pem holds no PEM certificate"},
		{"bad server_name", ", tls: {server_name: \"a b\"}", "svc.yaml:5:63: service \"web\": server_name \"a b\" is not a DNS name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadServiceFiles(writeFile(t, dir, "svc.yaml", check(c.tls)))
			want := dir + "/" + strings.ReplaceAll(c.want, "DIR", dir)
			if err == nil || err.Error() != want {
				t.Errorf("got %v\nwant %s", err, want)
			}
		})
	}
}

// An exec check's user is looked up when the file is loaded.
func TestCheckUser(t *testing.T) {
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody on this host")
	}
	check := func(u string) string {
		return svcGood + "health: {checks: [{type: exec, command: [/bin/true], user: " + u + "}]}\n"
	}
	svcs, err := loadServiceFiles(writeFile(t, t.TempDir(), "svc.yaml", check("nobody")))
	if err != nil {
		t.Fatal(err)
	}
	u := svcs[0].Health.Checks[0].User
	if u == nil || u.Name != "nobody" || strconv.Itoa(int(u.UID)) != nobody.Uid || strconv.Itoa(int(u.GID)) != nobody.Gid {
		t.Errorf("user %+v, want nobody %s:%s", u, nobody.Uid, nobody.Gid)
	}
	if got, want := serviceErrors(t, check("no-such-user-lvsd")), "svc.yaml:5:60: service \"web\": user \"no-such-user-lvsd\": no such user on this host"; got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}
