//go:build linux

package procfs // import "github.com/workerwatch/workerwatch/internal/procfs"

import "strings"

// Files of the cgroup v2 hierarchy, read through the same buffers as /proc.

// CgroupBytes reads a byte count of a cgroup directory (memory.current,
// memory.max); ok=false when the file is missing, "max" (no limit) or
// malformed.
func (r *Reader) CgroupBytes(dir, name string) (int64, bool) {
	r.plainPath(dir, name)
	b, err := r.readPath()
	if err != nil {
		return 0, false
	}
	return parseCgroupBytes(b)
}

// CgroupKey reads one "key value" line of a cgroup file (oom_kill of
// memory.events).
func (r *Reader) CgroupKey(dir, name, key string) (int64, bool) {
	r.plainPath(dir, name)
	b, err := r.readPath()
	if err != nil {
		return 0, false
	}
	return spaceField(b, key)
}

// CgroupCPUMax returns the tightest cpu.max quota of a cgroup and its
// ancestors below root (a pod's limit is often set on the pod's cgroup, a
// parent of the container's): quota and period in microseconds, ok=false
// when no level has a quota. rel is the cgroup's path relative to root
// ("/a/b" or "a/b"); root's own cpu.max does not exist.
func (r *Reader) CgroupCPUMax(root, rel string) (quota, period int64, ok bool) {
	rel = strings.Trim(rel, "/")
	for rel != "" && rel != "." {
		r.path = append(r.path[:0], root...)
		r.path = append(append(r.path, '/'), rel...)
		r.path = append(r.path, "/cpu.max\x00"...)
		if b, err := r.readPath(); err == nil {
			if q, per, good := parseCPUMax(b); good && (!ok || float64(q)/float64(per) < float64(quota)/float64(period)) {
				quota, period, ok = q, per, true
			}
		}
		i := strings.LastIndexByte(rel, '/')
		if i < 0 {
			break
		}
		rel = rel[:i]
	}
	return quota, period, ok
}

// CgroupProcs appends the pids of a cgroup and all its descendant cgroups
// (a cgroup that cannot be read contributes nothing).
func (r *Reader) CgroupProcs(dir string, out []int32) []int32 {
	b, err := r.ReadFile(dir + "/cgroup.procs")
	if err != nil {
		return out
	}
	out = ParsePidList(b, out)
	var subdirs []string
	_ = r.SubDirs(dir, func(name []byte) { subdirs = append(subdirs, string(name)) })
	for _, d := range subdirs {
		out = r.CgroupProcs(dir+"/"+d, out)
	}
	return out
}
