package config

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

// ReadKeyFile reads cluster keys: one standard base64 key per line, each
// 16, 24 or 32 bytes once decoded (AES-128, -192, -256); blank lines and
// lines starting with # are skipped. The first key encrypts what this
// director sends; all of them decrypt, which is how keys are rotated.
//
// The file must be private to the account lvsd runs as (root under the
// packaged unit): whoever can read it can join the cluster, take VIPs and
// inject connection state. So a file with any group or other permission
// bit, or owned by another user, is refused, at `lvsd check`, at start and
// when it is re-read.
func ReadKeyFile(path string) ([][]byte, error) {
	data, err := readChecked(path, private)
	if err != nil {
		return nil, fmt.Errorf("cluster key_file %s %v", path, err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: the key is not standard base64", path, i+1)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("%s:%d: the key is %d bytes, want 16, 24 or 32 (AES-128, -192, -256)", path, i+1, n)
		}
		if !slices.ContainsFunc(keys, func(o []byte) bool { return bytes.Equal(o, k) }) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no key (one base64 key per line, e.g. from `openssl rand -base64 32`)", path)
	}
	return keys, nil
}

// private refuses a key file that others may read or replace: mode bits
// for group or others, or an owner other than root and the account lvsd
// runs as.
func private(fi fs.FileInfo) error {
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	mode := fi.Mode().Perm()
	switch {
	case mode&0o077 != 0:
		return fmt.Errorf("has mode %04o (owner uid %d): group and others must have no access (chmod 600)", mode, uid)
	case uid != 0 && uid != os.Geteuid():
		return fmt.Errorf("is owned by uid %d, mode %04o: it must belong to root, or to the account lvsd runs as (chown root)", uid, mode)
	}
	return nil
}
