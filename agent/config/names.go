package config

import "slices"

// Names is a set of strings (service names, paths) to test every service
// or file of a large set against. A Go map hashes the whole key on every
// look-up, even in a map of one: a reload of one file among 10,000 spent a
// tenth of its time hashing names against sets of one or two. Up to
// namesCompared strings are compared instead, which for strings of
// different lengths is one comparison.
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
	return slices.Contains(n.few, s)
}
