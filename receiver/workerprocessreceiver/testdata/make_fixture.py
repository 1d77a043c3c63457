#!/usr/bin/env python3
"""Writes the fixture /proc and cgroup v2 trees under testdata/fixture/.

Run from this directory: python3 make_fixture.py. The files are committed; the
script documents what each process is for.
"""
import os, shutil

ROOT = "fixture"
PAGE = 4096

def stat(pid, comm, state, ppid, flags=0x400100, minflt=100, cminflt=0,
         utime=0, stime=0, cutime=0, cstime=0, threads=1, start=1000, rss_pages=0):
    f = [pid, "(%s)" % comm, state, ppid, pid, pid, 0, -1, flags, minflt, cminflt, 0, 0,
         utime, stime, cutime, cstime, 20, 0, threads, 0, start, rss_pages * PAGE * 4, rss_pages]
    f += [18446744073709551615, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0, 0]
    return " ".join(str(x) for x in f) + "\n"

def proc(pid, comm, state="S", ppid=1, cmdline="", env=None, children=None, tids=None,
         fds=0, cgroup="0::/user.slice", cpus="0-1", no_children_file=False, **kw):
    d = os.path.join(ROOT, "proc", str(pid))
    os.makedirs(os.path.join(d, "fd"), exist_ok=True)
    for i in range(fds):
        open(os.path.join(d, "fd", str(i)), "w").close()
    open(os.path.join(d, "stat"), "w").write(stat(pid, comm, state, ppid, threads=len(tids or [pid]), **kw))
    open(os.path.join(d, "cmdline"), "w").write("\0".join(cmdline.split(" ")) + "\0" if cmdline else "")
    open(os.path.join(d, "environ"), "w").write("".join("%s=%s\0" % kv for kv in (env or {}).items()))
    open(os.path.join(d, "cgroup"), "w").write(cgroup + "\n")
    open(os.path.join(d, "status"), "w").write("Name:\t%s\nCpus_allowed_list:\t%s\n" % (comm[:15], cpus))
    for tid in tids or [pid]:
        td = os.path.join(d, "task", str(tid))
        os.makedirs(td, exist_ok=True)
        if no_children_file:
            continue
        kids = (children or {}).get(tid, [])
        open(os.path.join(td, "children"), "w").write("".join("%d " % k for k in kids))

shutil.rmtree(ROOT, ignore_errors=True)
# The host's boot time (/proc/stat btime): the roots' process.creation.time
# is it plus their start time.
os.makedirs(os.path.join(ROOT, "proc"), exist_ok=True)
open(os.path.join(ROOT, "proc", "stat"), "w").write("cpu  0 0 0 0\nbtime 1699990000\nprocesses 400\n")
# init and an unrelated process: only read by the parent-pid fallback scan.
proc(1, "systemd", ppid=0, cmdline="/sbin/init", children={1: []}, start=1)
proc(200, "sshd", ppid=1, cmdline="/usr/sbin/sshd -D", start=50)
# Worker w1: the root (id from the cmdline capture, name from WORKER_NAME).
proc(100, "workersim", ppid=1, cmdline="/usr/bin/workersim worker --id w1",
     env={"PATH": "/bin", "WORKER_NAME": "alpha"}, children={100: [101, 102, 103, 104, 105, 110]},
     utime=300, stime=100, start=5000, rss_pages=2560, fds=8, cgroup="0::/user.slice/w1.scope",
     cminflt=10)
# A run child with two threads whose comm has spaces and ')'; its child was
# forked by the second thread, so it is only in that thread's children file.
proc(101, "run (a) b)", ppid=100, cmdline="/usr/bin/workersim run-child --run-id r1",
     tids=[101, 106], children={106: [107]}, utime=50, stime=10, start=5100, rss_pages=5120, fds=4)
# A zombie child: no memory, not walked, counted neither live nor exited on the first scrape.
proc(102, "workersim", state="Z", ppid=100, utime=7, stime=3, start=5150)
# A kernel thread (contrived parent): never a member.
proc(103, "kworker/0:1", ppid=100, flags=0x00208040, start=5160)
# 104 is listed as a child but has no directory: it exited mid-scrape.
# 105: a default-role child (its pid is reused in the second scrape).
proc(105, "sleep", ppid=100, cmdline="sleep 60", utime=1, stime=1, start=5200, rss_pages=100, fds=3)
# 107: a grandchild whose kernel lacks the children file: its child 108 is
# found through the parent-pid scan.
proc(107, "sh", ppid=101, cmdline="/bin/sh -c npm install", no_children_file=True,
     utime=2, stime=2, start=5300, rss_pages=200, fds=3)
proc(108, "node", ppid=107, cmdline="node /usr/lib/npm/bin/npm-cli.js install",
     utime=20, stime=5, start=5310, rss_pages=7680, fds=20)
# 110: forks short-lived children between scrapes (its cminflt grows in scrape 2).
proc(110, "worker-helper", ppid=100, cmdline="/usr/bin/helper", utime=4, stime=1,
     start=5400, rss_pages=300, fds=5)
# Worker cg-w2: a cgroup v2 worker (root 300, child 301).
proc(300, "python3", ppid=1, cmdline="python3 -m celery worker", children={300: [301]},
     utime=900, stime=100, start=7000, rss_pages=12800, fds=12, cgroup="0::/workers/w2", cpus="0")
proc(301, "python3", ppid=300, cmdline="python3 -m celery worker --child", utime=100, stime=20,
     start=7100, rss_pages=6400, fds=6, cgroup="0::/workers/w2", cpus="0")

def cg(rel, procs, current, mmax, oom, cpu_max=None):
    d = os.path.join(ROOT, "cgroup", rel)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "cgroup.procs"), "w").write("".join("%d\n" % p for p in procs))
    open(os.path.join(d, "memory.current"), "w").write("%d\n" % current)
    open(os.path.join(d, "memory.max"), "w").write(mmax + "\n")
    open(os.path.join(d, "memory.events"), "w").write("low 0\nhigh 0\nmax 3\noom 2\noom_kill %d\noom_group_kill 0\n" % oom)
    if cpu_max:
        open(os.path.join(d, "cpu.max"), "w").write(cpu_max + "\n")

cg("user.slice/w1.scope", [100, 101, 105, 107, 108, 110], 150000000, "max", 0)
cg("workers/w2", [300], 90000000, "209715200", 1, cpu_max="50000 100000")
cg("workers/w2/sub", [301], 30000000, "max", 0)
