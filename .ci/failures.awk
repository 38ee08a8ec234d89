# For every test that failed, the one-line messages its own code wrote, so
# the reason is at the end of the log and not buried in the logs a failing
# test dumps. The harness's own lines (each lvsd's warnings and log path,
# the lab's dumps: files named lvsd_test.go or *_helpers_test.go) come first
# and fewer; the test's own lines (its t.Log/t.Error, the last 30) come last,
# where a truncated view of the log still shows them.
/^=== RUN/ { name = $3; n[name] = 0; h[name] = 0; next }
/^=== (CONT|NAME)/ { name = $3; next }
/^ *--- FAIL: / { failed[++nf] = $3; next }
match($0, /^ +[A-Za-z0-9_]+\.go:[0-9]+: /) {
	line = substr($0, 1, 300)
	if ($1 ~ /^(lvsd_test|[a-z0-9_]+_helpers_test)\.go:/) harness[name, ++h[name]] = line
	else own[name, ++n[name]] = line
}
END {
	for (i = 1; i <= nf; i++) {
		t = failed[i]
		if (!(t in n) || seen[t]++) continue
		print "ci: " t " failed; the harness's lines:"
		for (j = (h[t] > 12 ? h[t] - 11 : 1); j <= h[t]; j++) print "ci:   " harness[t, j]
		print "ci: " t " failed; its own lines:"
		for (j = (n[t] > 30 ? n[t] - 29 : 1); j <= n[t]; j++) print "ci:   " own[t, j]
	}
}
