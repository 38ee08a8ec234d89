// Package program holds what lvsd does alike for every program of the
// operator's it runs (exec health checks, event hooks): the environment
// it passes on, the bounded capture of the output, and a process group
// killed as a whole.
package program
