// Package systemd tests lvsd as operators run it: the .deb built by `make
// package`, installed with dpkg on a VM that booted systemd as PID 1
// (`e2e/vm/run --init systemd`, which `make e2e` uses for this package
// only; the other e2e packages keep the faster bash init). lvsd then runs
// as lvsd.service in the VM's root network namespace, directing traffic
// from an e2e/topo client to e2e/echo real servers over the topology's
// bridge. The tests carry the build tag e2e.
package systemd
