package config

import (
	"errors"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
)

// ErrNoConfig is wrapped when the agent file itself does not exist, which is a
// different problem from a file that exists and is wrong.
var ErrNoConfig = errors.New("no configuration file")

// Error is one problem in one file, at a line and column (0 when unknown).
type Error = yamldoc.Error

// List collects every problem found, so one run of `lvsd check` shows them all.
type List = yamldoc.List

// doc is one document of an agent or service file. lvsd's schema checks
// are its methods (agent.go, service.go and the others); placing their
// messages and decoding are yamldoc's.
type doc struct {
	*yamldoc.Doc
	// laxModes (strict_modes: false): the programs the document names are
	// run whoever may write them (program.Check).
	laxModes bool
}

// eachDoc calls f with each document of file (yamldoc.Each).
func eachDoc(file string, data []byte, errs *List, f func(*doc)) {
	yamldoc.Each(file, data, errs, func(d *yamldoc.Doc) { f(&doc{Doc: d}) })
}
