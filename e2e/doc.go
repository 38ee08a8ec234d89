// Package e2e holds lvsd's black-box tests. They run as root inside a VM with a
// stock Debian kernel (real IPVS), started by `make e2e` through
// `go test -exec e2e/vm/run`: the built lvsd binary runs in network namespaces
// built by e2e/topo, real servers are e2e/echo, and every assertion is on real
// traffic or on the kernel's tables. The tests carry the build tag e2e.
package e2e
