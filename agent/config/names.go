package config

// Names is a set of strings (service names, paths) to test every service
// or file of a large set against. A Go map hashes the whole key on every
// look-up, even in a map of one: a reload of one file among 10,000 spent a
// tenth of its time hashing names against sets of one or two. Up to
// namesCompared strings are compared instead, each by its length and last
// byte first: names of one length (s00001 … s09999) otherwise cost a
// memory comparison each, and they differ most often at their end.
type Names struct {
	few  []string
	many map[string]bool
}

const namesCompared = 8

// NamesOf returns the set of the keys of m that are true.
func NamesOf(m map[string]bool) Names {
	var n Names
	for k, in := range m {
		if in {
			n.few = append(n.few, k)
		}
	}
	if len(n.few) > namesCompared {
		n.few, n.many = nil, m
	}
	return n
}

// Has reports whether s is in the set.
func (n Names) Has(s string) bool {
	if n.many != nil {
		return n.many[s]
	}
	for _, f := range n.few {
		if len(f) == len(s) && (len(s) == 0 || f[len(f)-1] == s[len(s)-1]) && f == s {
			return true
		}
	}
	return false
}
