package config

import (
	"crypto/x509"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/program"
)

// checkKeys says which check types read each type-specific key: any other
// type would ignore it, so giving it is an error.
var checkKeys = []struct {
	key   string
	types []string
	set   func(rawCheck) bool
}{
	{"port", []string{"tcp", "http", "https", "udp", "dns", "exec"}, func(c rawCheck) bool { return c.Port != nil }},
	{"method", []string{"http", "https"}, func(c rawCheck) bool { return c.Method != "" }},
	{"path", []string{"http", "https"}, func(c rawCheck) bool { return c.Path != "" }},
	{"host", []string{"http", "https"}, func(c rawCheck) bool { return c.Host != "" }},
	{"expect", []string{"http", "https"}, func(c rawCheck) bool { return c.Expect != "" }},
	{"body", []string{"http", "https"}, func(c rawCheck) bool { return c.Body != "" }},
	{"tls", []string{"https"}, func(c rawCheck) bool { return c.TLS != nil }},
	{"send", []string{"udp"}, func(c rawCheck) bool { return c.Send != "" }},
	{"receive", []string{"udp"}, func(c rawCheck) bool { return c.Receive != "" }},
	{"query", []string{"dns"}, func(c rawCheck) bool { return c.Query != "" }},
	{"command", []string{"exec"}, func(c rawCheck) bool { return c.Command != nil }},
	{"user", []string{"exec"}, func(c rawCheck) bool { return c.User != "" }},
}

// check validates one check at path; interval and timeout are the
// defaults of its health block.
func (d *doc) check(path, subject string, rc rawCheck, interval, timeout time.Duration) Check {
	c := Check{Type: rc.Type, Method: orDefault(rc.Method, "GET"), Path: orDefault(rc.Path, "/"), Host: rc.Host,
		Expect: [2]int{200, 399}, Body: rc.Body, Send: rc.Send, Receive: rc.Receive, Query: rc.Query, Command: rc.Command}
	if !oneOf(c.Type, CheckTypes...) {
		d.Errorf(path+".type", "%s: check type %q is not one of %s", subject, rc.Type, strings.Join(CheckTypes, ", "))
	} else {
		for _, k := range checkKeys {
			if k.set(rc) && !slices.Contains(k.types, c.Type) {
				d.Errorf(path+"."+k.key, "%s: %s is for %s checks, not %s (it would be ignored)", subject, k.key, strings.Join(k.types, ", "), c.Type)
			}
		}
	}
	if rc.Port != nil {
		c.Port = uint16(*rc.Port) // 1-65535: its range tag
	}
	c.Interval = d.duration(path+".interval", subject, "interval", string(rc.Interval), interval)
	c.Timeout = d.duration(path+".timeout", subject, "timeout", string(rc.Timeout), timeout)
	switch {
	case c.Interval < 100*time.Millisecond:
		d.Errorf(path+".interval", "%s: check interval %s is below 100ms", subject, c.Interval)
	case c.Timeout <= 0 || c.Timeout > c.Interval:
		d.Errorf(path+".timeout", "%s: check timeout %s must be above 0 and at most the interval %s", subject, c.Timeout, c.Interval)
	}
	if rc.Expect != "" {
		lo, hi, isRange := strings.Cut(string(rc.Expect), "-")
		a, ok1 := parseDecimal(lo)
		b, ok2 := a, true
		if isRange {
			b, ok2 = parseDecimal(hi)
		}
		if !ok1 || !ok2 || a < 100 || b > 599 || b < a {
			d.Errorf(path+".expect", "%s: expect %q is not an HTTP status or range like 200-299", subject, rc.Expect)
		}
		c.Expect = [2]int{a, b}
	}
	if !strings.HasPrefix(c.Path, "/") {
		d.Errorf(path+".path", "%s: check path %q must start with /", subject, c.Path)
	}
	switch c.Type {
	case "exec":
		c.LaxModes = d.laxModes
		if len(c.Command) == 0 {
			d.Errorf(path, "%s: an exec check needs command: [program, args...]", subject)
		} else if err := d.checkProgram(c.Command[0]); err != nil {
			d.Errorf(path+".command", "%s: %v", subject, err)
		}
		if rc.User != "" {
			c.User = d.checkUser(path+".user", subject, rc.User)
		}
	case "dns":
		if c.Query == "" {
			d.Errorf(path, "%s: a dns check needs query: a name to resolve", subject)
		}
	case "https":
		c.TLS = d.checkTLS(path+".tls", subject, rc.TLS)
	}
	return c
}

// parseDecimal reads a whole number written in plain decimal (no sign,
// no leading zero, at most 9 digits).
func parseDecimal(s string) (int, bool) {
	if s == "" || len(s) > 9 || (s[0] == '0' && len(s) > 1) || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// checkTLS validates an https check's tls block (nil: the defaults).
func (d *doc) checkTLS(path, subject string, raw *rawTLS) TLS {
	if raw == nil {
		return TLS{}
	}
	t := TLS{ServerName: raw.ServerName, Verify: raw.CAFile != "" || raw.ServerName != ""}
	if raw.Verify != nil {
		if !*raw.Verify && t.Verify {
			d.Errorf(path+".verify", "%s: verify: false would ignore ca_file and server_name; leave them out, or verify", subject)
		}
		t.Verify = *raw.Verify
	}
	if raw.ServerName != "" && !isHostname(raw.ServerName) {
		d.Errorf(path+".server_name", "%s: server_name %q is not a DNS name", subject, raw.ServerName)
	}
	if raw.CAFile != "" {
		t.CAFile = relativeTo(d.File, raw.CAFile)
		data, err := readFile(t.CAFile)
		switch {
		case err != nil:
			d.Errorf(path+".ca_file", "%s: ca_file %s %v", subject, t.CAFile, err)
		case !x509.NewCertPool().AppendCertsFromPEM(data):
			d.Errorf(path+".ca_file", "%s: ca_file %s holds no PEM certificate", subject, t.CAFile)
		default:
			t.RootCAs = data
		}
	}
	return t
}

// checkUser looks up the account an exec check runs as.
func (d *doc) checkUser(path, subject, account string) *User {
	u, err := user.Lookup(account)
	if err != nil {
		d.Errorf(path, "%s: user %q: %v", subject, account, lookupError(err))
		return nil
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		d.Errorf(path, "%s: user %q has no numeric uid and gid", subject, account)
		return nil
	}
	out := &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	groups, _ := u.GroupIds()
	for _, g := range groups {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			out.Groups = append(out.Groups, uint32(n))
		}
	}
	return out
}

func lookupError(err error) string {
	if _, ok := err.(user.UnknownUserError); ok {
		return "no such user on this host"
	}
	return err.Error()
}

// checkProgram refuses an exec check's program that anyone but root may
// replace (program.Check), unless strict_modes is off. A program not found
// is left to the check to report when it runs, as before: it may be
// installed after the service.
func (d *doc) checkProgram(name string) error {
	if d.laxModes {
		return nil
	}
	path := name
	if !filepath.IsAbs(path) {
		found, err := exec.LookPath(name)
		if err != nil {
			return nil
		}
		if path, err = filepath.Abs(found); err != nil {
			return nil
		}
	}
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	return program.Check(path, true)
}
