package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/scraper/scraperhelper"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

// Config is the worker_process receiver's configuration. Defaults are set in
// createDefaultConfig only; the README lists them.
type Config struct {
	// collection_interval (default 10s), initial_delay (1s), timeout.
	scraperhelper.ControllerConfig `mapstructure:",squash"`
	// metrics / resource_attributes: enable or disable each metric.
	metadata.MetricsBuilderConfig `mapstructure:",squash"`

	// ProcRoot is where procfs is mounted. Default "/proc"; "/hostfs/proc" when
	// the collector runs in a container with the host's /proc mounted there.
	ProcRoot string `mapstructure:"proc_root"`
	// CgroupRoot is where the cgroup v2 hierarchy is mounted. Default
	// "/sys/fs/cgroup" ("/sys/fs/cgroup/unified" on hybrid v1/v2 hosts).
	CgroupRoot string `mapstructure:"cgroup_root"`
	// DiscoveryInterval is how often a full scan of the proc root looks for
	// new workers matched by executable/command line while the known ones are
	// alive. A scan also runs whenever a known root exits or a selector
	// matches nothing. Default 1m.
	DiscoveryInterval time.Duration `mapstructure:"discovery_interval"`
	// ForgetAfter is how long an absent worker whose id came from the process
	// (capture, pid, environment) is still reported with
	// workerwatch.worker.present = 0 before its state is dropped. Default 10m.
	ForgetAfter time.Duration `mapstructure:"forget_after"`
	// TopProcesses bounds the per-process series of the opt-in metric
	// workerwatch.process.top.memory.usage: the N largest processes by RSS
	// per worker. Default 5; must be between 0 and 100.
	TopProcesses int `mapstructure:"top_processes"`
	// TopProcessesCommandLine adds the redacted command line
	// (process.command_line) to the top-N series only. Off by default:
	// command lines carry secrets.
	TopProcessesCommandLine CommandLineConfig `mapstructure:"top_processes_command_line"`
	// PSSMaxRSS is the RSS above which a process's PSS is not read (reading
	// smaps_rollup walks every mapping and stalls a big process), for the
	// opt-in metric workerwatch.process.memory.pss. Default 256MiB (268435456).
	PSSMaxRSS int64 `mapstructure:"pss_max_rss"`
	// ProcessEvents selects exact fork/exit accounting through the kernel's
	// process events connector: "auto" (default: used when the subscription
	// succeeds and proc_root is a procfs, else sampling), "netlink" (required:
	// Start fails without it) or "off" (sampling only).
	ProcessEvents string `mapstructure:"process_events"`
	// MaxOpenFiles bounds the /proc files kept open between scrapes (each
	// process's stat, children and fd directory; see internal/procfs/held.go), which
	// makes reading a process about 2.5x cheaper (BenchmarkScrape). Each
	// held stat or children file keeps one page (4 KiB) of kernel memory.
	// Processes past the bound are read by opening their files on every
	// scrape. It is also capped at half the process's open-file limit
	// (RLIMIT_NOFILE). Default 4096; 0 holds none.
	MaxOpenFiles int `mapstructure:"max_open_files"`
	// Workers lists the workers to watch. At least one is required.
	Workers []WorkerConfig `mapstructure:"workers"`
}

// WorkerConfig selects one kind of worker; a command-line selector may match
// several instances on one host, each becoming a worker with its own id.
type WorkerConfig struct {
	// ID is the template of cicd.worker.id: text with placeholders {pid} (the
	// root pid), {env:NAME} (an environment variable of the root), {cgroup}
	// (the base name of the matched cgroup) and {NAME} (a named capture of the
	// cmdline regex). Default: {id} when the regex has a capture named "id",
	// else the worker's name when set; otherwise required.
	ID string `mapstructure:"id"`
	// Name is the template of cicd.worker.name (same placeholders); optional.
	Name string `mapstructure:"name"`
	// Selector finds the worker's root process (exactly one kind).
	Selector SelectorConfig `mapstructure:"selector"`
	// Roles classify the root's descendants, first match wins; the root is
	// always "main".
	Roles []RoleConfig `mapstructure:"roles"`
	// DefaultRole is the role of descendants no role matches. Default "child"
	// (applied when empty: list elements have no place in createDefaultConfig).
	DefaultRole string `mapstructure:"default_role"`
}

// SelectorConfig: exactly one of pid_file, (executable and/or cmdline), cgroup.
type SelectorConfig struct {
	// PIDFile is a file holding the root's pid.
	PIDFile string `mapstructure:"pid_file"`
	// Executable matches the process's executable name (comm, or the base name
	// of argv[0] since comm is cut at 15 bytes).
	Executable string `mapstructure:"executable"`
	// Cmdline is a regular expression (RE2) over the command line, arguments
	// joined by spaces; named captures feed the id and name templates.
	Cmdline string `mapstructure:"cmdline"`
	// Cgroup is a cgroup v2 path relative to cgroup_root (a glob pattern such
	// as "system.slice/worker@*.service" finds one worker per cgroup); the
	// processes of the cgroup and its descendants form the worker.
	Cgroup string `mapstructure:"cgroup"`
}

// RoleConfig names a role and what matches it (cmdline, executable and/or
// depth; all that are set must match).
type RoleConfig struct {
	Name       string `mapstructure:"name"`
	Cmdline    string `mapstructure:"cmdline"`
	Executable string `mapstructure:"executable"`
	// Depth is the role by position: 1 matches the root's direct children
	// only (a prefork pool whose children keep the parent's command line,
	// as Celery's ForkPoolWorkers without setproctitle). 0 (default): any
	// depth. Only 0 and 1 are accepted.
	Depth int `mapstructure:"depth"`
}

// Values of the process_events key.
const (
	processEventsAuto    = "auto"
	processEventsNetlink = "netlink"
	processEventsOff     = "off"
)

var _ component.Config = (*Config)(nil)

// Validate checks the configuration; every error names the YAML key.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.ProcRoot == "" {
		errs = append(errs, errors.New("proc_root: must not be empty"))
	}
	if cfg.DiscoveryInterval <= 0 {
		errs = append(errs, errors.New("discovery_interval: must be positive"))
	}
	if cfg.ForgetAfter <= 0 {
		errs = append(errs, errors.New("forget_after: must be positive"))
	}
	if cfg.TopProcesses < 0 || cfg.TopProcesses > 100 {
		errs = append(errs, fmt.Errorf("top_processes: must be between 0 and 100, got %d", cfg.TopProcesses))
	}
	for i, p := range cfg.TopProcessesCommandLine.Redact {
		if _, err := regexp.Compile(p); err != nil {
			errs = append(errs, fmt.Errorf("top_processes_command_line.redact[%d]: %w", i, err))
		}
	}
	top := cfg.Metrics.WorkerwatchProcessTopMemoryUsage
	if cfg.TopProcessesCommandLine.Enabled && (!top.Enabled || cfg.TopProcesses == 0) {
		errs = append(errs, errors.New("top_processes_command_line.enabled: needs metrics.workerwatch.process.top.memory.usage.enabled: true and top_processes above 0 (the command line is only an attribute of that metric)"))
	}
	if !cfg.TopProcessesCommandLine.Enabled && slices.Contains(top.EnabledAttributes, metadata.WorkerwatchProcessTopMemoryUsageMetricAttributeKeyProcessCommandLine) {
		errs = append(errs, errors.New("metrics.workerwatch.process.top.memory.usage.attributes: process.command_line is switched on by top_processes_command_line.enabled: true (which also redacts it), not here"))
	}
	switch cfg.ProcessEvents {
	case processEventsAuto, processEventsNetlink, processEventsOff:
	default:
		errs = append(errs, fmt.Errorf("process_events: must be auto, netlink or off, got %q", cfg.ProcessEvents))
	}
	if cfg.MaxOpenFiles < 0 {
		errs = append(errs, fmt.Errorf("max_open_files: must not be negative, got %d", cfg.MaxOpenFiles))
	}
	if cfg.PSSMaxRSS < 0 {
		errs = append(errs, fmt.Errorf("pss_max_rss: must not be negative, got %d", cfg.PSSMaxRSS))
	}
	if len(cfg.Workers) == 0 {
		errs = append(errs, errors.New("workers: at least one worker is required"))
	}
	ids := map[string]int{}
	for i := range cfg.Workers {
		errs = append(errs, cfg.Workers[i].validate(fmt.Sprintf("workers[%d]", i))...)
		if id := cfg.Workers[i].ID; id != "" && !templateHasPlaceholder(id) {
			if j, dup := ids[id]; dup {
				errs = append(errs, fmt.Errorf("workers[%d].id: %q is also the id of workers[%d]", i, id, j))
			}
			ids[id] = i
		}
	}
	return errors.Join(errs...)
}

func (w *WorkerConfig) validate(key string) []error {
	var errs []error
	s := w.Selector
	kinds := 0
	if s.PIDFile != "" {
		kinds++
	}
	if s.Executable != "" || s.Cmdline != "" {
		kinds++
	}
	if s.Cgroup != "" {
		kinds++
	}
	switch {
	case kinds == 0:
		errs = append(errs, fmt.Errorf("%s.selector: one of pid_file, executable/cmdline or cgroup is required", key))
	case kinds > 1:
		errs = append(errs, fmt.Errorf("%s.selector: pid_file, executable/cmdline and cgroup are exclusive; set only one", key))
	}
	var captures []string
	if s.Cmdline != "" {
		re, err := regexp.Compile(s.Cmdline)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.selector.cmdline: %w", key, err))
		} else {
			captures = re.SubexpNames()
		}
	}
	if s.Cgroup != "" {
		if _, err := path.Match(s.Cgroup, ""); err != nil {
			errs = append(errs, fmt.Errorf("%s.selector.cgroup: %w", key, err))
		}
	}
	idTmpl := w.effectiveID(captures)
	if idTmpl == "" {
		errs = append(errs, fmt.Errorf("%s.id: required (no name, and the cmdline regex has no capture named \"id\")", key))
	} else if _, err := parseTemplate(idTmpl, captures, s.Cgroup != ""); err != nil {
		errs = append(errs, fmt.Errorf("%s.id: %w", key, err))
	}
	if w.Name != "" {
		if _, err := parseTemplate(w.Name, captures, s.Cgroup != ""); err != nil {
			errs = append(errs, fmt.Errorf("%s.name: %w", key, err))
		}
	}
	if w.DefaultRole == contract.RoleMain {
		errs = append(errs, fmt.Errorf("%s.default_role: %q is reserved for the root process", key, contract.RoleMain))
	}
	for j, r := range w.Roles {
		rk := fmt.Sprintf("%s.roles[%d]", key, j)
		switch r.Name {
		case "":
			errs = append(errs, fmt.Errorf("%s.name: required", rk))
		case contract.RoleMain:
			errs = append(errs, fmt.Errorf("%s.name: %q is reserved for the root process", rk, contract.RoleMain))
		}
		if r.Cmdline == "" && r.Executable == "" && r.Depth == 0 {
			errs = append(errs, fmt.Errorf("%s: cmdline, executable or depth is required", rk))
		}
		if r.Depth != 0 && r.Depth != 1 {
			errs = append(errs, fmt.Errorf("%s.depth: must be 0 (any) or 1 (the root's direct children), got %d", rk, r.Depth))
		}
		if r.Cmdline != "" {
			if _, err := regexp.Compile(r.Cmdline); err != nil {
				errs = append(errs, fmt.Errorf("%s.cmdline: %w", rk, err))
			}
		}
	}
	return errs
}

// effectiveID is the id template after the documented defaults.
func (w *WorkerConfig) effectiveID(captures []string) string {
	if w.ID != "" {
		return w.ID
	}
	for _, c := range captures {
		if c == "id" {
			return "{id}"
		}
	}
	return w.Name
}
