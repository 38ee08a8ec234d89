module github.com/lvsd/lvsd

go 1.26.8

require (
	github.com/goccy/go-yaml v1.19.2
	github.com/moby/ipvs v1.1.0
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	golang.org/x/sys v0.28.0
)

require github.com/sirupsen/logrus v1.9.0 // indirect
