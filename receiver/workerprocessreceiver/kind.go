//go:build linux

package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/procfs"
)

type selectorKind int

const (
	selPIDFile selectorKind = iota
	selMatch
	selCgroup
)

// workerKind is one configured worker (workers[i]) compiled for scraping; a
// match or cgroup selector may yield several worker instances.
type workerKind struct {
	key string // "workers[i]", for log messages
	// Warn-once keys of the per-process permission errors, built once: the
	// checks run for every process of every scrape.
	keyStat, keyFD, keyPSS string
	// files are the scraper's held files (members close theirs on leaving).
	files *procfs.HeldFiles
	sel   selectorKind
	cfg   WorkerConfig

	re  *regexp.Regexp // selector.cmdline
	exe string         // selector.executable

	idT, nameT *template
	envs       []string // environment variables the templates read

	roles   []string // 0 = main, then configured roles, then the default role
	roleRe  []*regexp.Regexp
	roleExe []string
	// roleDirect: the role matches the root's direct children only (depth 1).
	roleDirect []bool
	defRole    int

	instances map[string]*worker
	lastScan  time.Time
	needScan  bool
	// pidFileWhy is why the pid file matched nothing at the last scrape, as
	// logged ("" while it names a live process).
	pidFileWhy string
}

func newWorkerKind(i int, cfg WorkerConfig) (*workerKind, error) {
	k := &workerKind{key: fmt.Sprintf("workers[%d]", i), cfg: cfg, instances: map[string]*worker{}, needScan: true}
	k.keyStat, k.keyFD, k.keyPSS = k.key+"/stat", k.key+"/fd", k.key+"/pss"
	var captures []string
	switch {
	case cfg.Selector.PIDFile != "":
		k.sel = selPIDFile
	case cfg.Selector.Cgroup != "":
		k.sel = selCgroup
	default:
		k.sel = selMatch
		k.exe = cfg.Selector.Executable
		if cfg.Selector.Cmdline != "" {
			re, err := regexp.Compile(cfg.Selector.Cmdline)
			if err != nil {
				return nil, fmt.Errorf("%s.selector.cmdline: %w", k.key, err)
			}
			k.re = re
			captures = re.SubexpNames()
		}
	}
	var err error
	if k.idT, err = parseTemplate(cfg.effectiveID(captures), captures, k.sel == selCgroup); err != nil {
		return nil, fmt.Errorf("%s.id: %w", k.key, err)
	}
	if cfg.Name != "" {
		if k.nameT, err = parseTemplate(cfg.Name, captures, k.sel == selCgroup); err != nil {
			return nil, fmt.Errorf("%s.name: %w", k.key, err)
		}
		k.envs = append(k.envs, k.nameT.envs...)
	}
	k.envs = append(k.envs, k.idT.envs...)

	k.roles = append(k.roles, contract.RoleMain)
	for j, r := range cfg.Roles {
		var re *regexp.Regexp
		if r.Cmdline != "" {
			if re, err = regexp.Compile(r.Cmdline); err != nil {
				return nil, fmt.Errorf("%s.roles[%d].cmdline: %w", k.key, j, err)
			}
		}
		k.roles = append(k.roles, r.Name)
		k.roleRe = append(k.roleRe, re)
		k.roleExe = append(k.roleExe, r.Executable)
		k.roleDirect = append(k.roleDirect, r.Depth == 1)
	}
	def := cfg.DefaultRole
	if def == "" {
		def = contract.RoleChild
	}
	k.defRole = -1
	for j, r := range k.roles {
		if r == def {
			k.defRole = j
		}
	}
	if k.defRole < 0 {
		k.roles = append(k.roles, def)
		k.defRole = len(k.roles) - 1
	}
	return k, nil
}

// exeMatches compares an executable name with comm (cut at 15 bytes by the
// kernel) or the base name of argv[0].
func exeMatches(want, comm, cmdline string) bool {
	if want == comm {
		return true
	}
	if len(comm) == 15 && len(want) > 15 && strings.HasPrefix(want, comm) {
		return true
	}
	if cmdline != "" {
		argv0 := cmdline
		if i := strings.IndexByte(argv0, ' '); i >= 0 {
			argv0 = argv0[:i]
		}
		return path.Base(argv0) == want
	}
	return false
}

// classify returns the role of a non-root member; direct says whether its
// parent is the root.
func (k *workerKind) classify(comm, cmdline string, direct bool) int {
	for j := range k.roleRe {
		if k.roleDirect[j] && !direct {
			continue
		}
		if k.roleExe[j] != "" && !exeMatches(k.roleExe[j], comm, cmdline) {
			continue
		}
		if k.roleRe[j] != nil && !k.roleRe[j].MatchString(cmdline) {
			continue
		}
		return j + 1
	}
	return k.defRole
}

// staticID is the id (and name) of a kind whose id template is fixed text:
// such a worker is reported absent even before it was ever seen.
func (k *workerKind) staticID() (string, string, bool) {
	if !k.idT.isStatic() {
		return "", "", false
	}
	id, _ := k.idT.render(&templateValues{})
	name := ""
	if k.nameT != nil && k.nameT.isStatic() {
		name, _ = k.nameT.render(&templateValues{})
	}
	return id, name, true
}
