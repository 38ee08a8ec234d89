# For every test that failed, the one-line messages its own code wrote
# (the last 40 t.Log/t.Error lines, without the multi-line dumps that follow some of
# them), so the reason is at the end of the log and not buried in the logs a
# failing test dumps.
/^=== RUN/ { name = $3; n[name] = 0; next }
/^=== (CONT|NAME)/ { name = $3; next }
/^ *--- FAIL: / { failed[++nf] = $3; next }
match($0, /^ +[A-Za-z0-9_]+\.go:[0-9]+: /) {
	lines[name, ++n[name]] = substr($0, 1, 300)
}
END {
	for (i = 1; i <= nf; i++) {
		t = failed[i]
		if (!(t in n) || seen[t]++) continue
		print "ci: " t " failed; its own lines:"
		for (j = (n[t] > 40 ? n[t] - 39 : 1); j <= n[t]; j++) print "ci:   " lines[t, j]
	}
}
