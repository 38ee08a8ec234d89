package config

import (
	"errors"
	"os/user"
	"strconv"
)

// ReadOnlyAPI is the optional second socket of the local API, for
// monitoring tools: mode 0660 with Group, serving only what reads
// (status, explain, the backend overrides), never a change.
type ReadOnlyAPI struct {
	Socket string
	Group  string // as written: a name or a numeric id
	GID    int
}

type rawAPI struct {
	Socket         string `yaml:"socket"`
	ReadOnlySocket string `yaml:"read_only_socket"`
	ReadOnlyGroup  string `yaml:"read_only_group"`
}

// readOnlyAPI validates the read-only socket: off unless both keys are
// given; the group must exist on this host (a socket nobody may open is
// a mistake to report now, not at start).
func (d *doc) readOnlyAPI(raw rawAPI, file, socket string) *ReadOnlyAPI {
	switch {
	case raw.ReadOnlySocket == "" && raw.ReadOnlyGroup == "":
		return nil
	case raw.ReadOnlySocket == "":
		d.Errorf("$.api.read_only_group", "read_only_group needs read_only_socket: the path of the read-only socket")
		return nil
	case raw.ReadOnlyGroup == "":
		d.Errorf("$.api.read_only_socket", "read_only_socket needs read_only_group: the group whose members may read (the socket is mode 0660)")
		return nil
	}
	ro := &ReadOnlyAPI{Socket: relativeTo(file, raw.ReadOnlySocket), Group: raw.ReadOnlyGroup}
	if ro.Socket == socket {
		d.Errorf("$.api.read_only_socket", "read_only_socket %s is the control socket: name another path", ro.Socket)
		return nil
	}
	g, err := lookupGroup(raw.ReadOnlyGroup)
	if err != nil {
		d.Errorf("$.api.read_only_group", "read_only_group %q: %v", raw.ReadOnlyGroup, err)
		return nil
	}
	if ro.GID, err = strconv.Atoi(g.Gid); err != nil {
		d.Errorf("$.api.read_only_group", "read_only_group %q has no numeric id", raw.ReadOnlyGroup)
		return nil
	}
	return ro
}

// lookupGroup finds a group by name, or by id when it is a number.
func lookupGroup(name string) (*user.Group, error) {
	if _, err := strconv.Atoi(name); err == nil {
		g, err := user.LookupGroupId(name)
		if _, unknown := err.(user.UnknownGroupIdError); unknown {
			return nil, errNoGroup
		}
		return g, err
	}
	g, err := user.LookupGroup(name)
	if _, unknown := err.(user.UnknownGroupError); unknown {
		return nil, errNoGroup
	}
	return g, err
}

var errNoGroup = errors.New("no such group on this host")
