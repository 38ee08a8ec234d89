package health

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxBadValue bounds how much of an invalid header value is kept for the
// log.
const maxBadValue = 32

// parseWeight reads the weight header's values. It returns the weight, or
// NoWeight when the header is absent; when the header is present but not
// exactly one decimal integer in 0..MaxWeight (spaces around it allowed),
// bad is the offending value (truncated, for the log) and the weight must be
// ignored. Signs, hex, fractions and several differing values are all
// rejected: the value steers traffic, so anything unexpected is distrusted
// rather than guessed at.
func parseWeight(values []string) (weight int, bad string) {
	if len(values) == 0 {
		return NoWeight, ""
	}
	for _, v := range values[1:] {
		if v != values[0] {
			return 0, truncate(strings.Join(values, ", "))
		}
	}
	v := strings.TrimSpace(values[0])
	if v == "" || len(v) > 4 || strings.Trim(v, "0123456789") != "" {
		return 0, truncate(quoteIfEmpty(values[0]))
	}
	w, err := strconv.Atoi(v)
	if err != nil || w > MaxWeight {
		return 0, truncate(values[0])
	}
	return w, ""
}

// quoteIfEmpty makes an empty or blank value visible in bad (which must be
// non-empty to mean "invalid").
func quoteIfEmpty(v string) string {
	if strings.TrimSpace(v) == "" {
		return strconv.Quote(v)
	}
	return v
}

// truncate cuts v to maxBadValue bytes, never inside a character, so that
// the log line stays valid UTF-8.
func truncate(v string) string {
	if len(v) <= maxBadValue {
		return v
	}
	cut := maxBadValue
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + "…"
}
