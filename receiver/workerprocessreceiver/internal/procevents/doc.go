// Package procevents counts the forks and exits of a worker's tree through
// the Linux proc connector (NETLINK_CONNECTOR, group CN_IDX_PROC).
//
// /proc only shows the processes alive at a scrape; a child that starts and
// exits between two scrapes is invisible there. The kernel sends one message
// per fork and per exit on the host; a reader goroutine keeps, per tracked
// worker (a Group), the set of live member tgids (seeded from every walk of
// the worker's tree through Sync, extended by forks whose parent is a member,
// shrunk by exits) and queues the exits of members no walk has seen. The
// receiver counts those as started and exited in the worker's default role;
// members a walk has seen are counted by the receiver itself, in the role
// they were classified with, so no process is counted twice.
//
// Linux only: on other systems the package is empty.
package procevents // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/procevents"
