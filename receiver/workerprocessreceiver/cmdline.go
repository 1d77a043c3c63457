package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// CommandLineConfig is the opt-in process.command_line attribute of the
// per-process top-N series. Command lines routinely carry secrets (tokens,
// passwords, credentials in URLs), so the receiver never reads them for export
// unless enabled, and always passes them through redaction first.
type CommandLineConfig struct {
	// Enabled adds process.command_line to workerwatch.process.top.memory.usage
	// (and to no other metric). Default false.
	Enabled bool `mapstructure:"enabled"`
	// Redact lists RE2 regexes applied after the built-in ones
	// (defaultRedactions, always applied): every match is replaced by its
	// capture groups 1 and 2 (when the pattern has them) around "***", so
	// `(--db-password=)\S+` keeps the flag name. Use (?:...) for other groups.
	Redact []string `mapstructure:"redact"`
}

// defaultRedactions are always applied before the configured ones. Their
// groups 1 and 2 are kept around the "***".
var defaultRedactions = []string{
	// --token=abc, -password abc, --db-secret-key=abc, --api_key abc:
	// flags whose name mentions a secret, keeping the flag name.
	`(?i)(--?[a-z0-9_-]*(?:secret|token|password|passwd|key|credential)[a-z0-9_-]*[= ])\S+`,
	// NAME=value assignments (env prefixes in `sh -c` lines) of the same kind.
	`(?i)(\b[a-z0-9_]*(?:secret|token|password|passwd|key|credential)[a-z0-9_]*=)\S+`,
	// Authorization: Bearer abc.
	`(?i)(bearer\s+)\S+`,
	// user:password@ in URLs (postgres://u:p@host/db).
	`(://)[^/@\s]+:[^/@\s]+(@)`,
}

// maxCommandLine bounds the exported attribute: a command line can be as long
// as ARG_MAX (2 MiB), and the value lands in every exported series.
const maxCommandLine = 1024

// redactor applies the built-in and configured patterns in order.
type redactor struct {
	res []*regexp.Regexp
}

func newRedactor(extra []string) (*redactor, error) {
	r := &redactor{}
	for i, p := range append(slices.Clone(defaultRedactions), extra...) {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("top_processes_command_line.redact[%d]: %w", i-len(defaultRedactions), err)
		}
		r.res = append(r.res, re)
	}
	return r, nil
}

// apply redacts a command line, then bounds it (on a rune boundary) and makes
// it valid UTF-8 (exporters require it of string attributes).
func (r *redactor) apply(cmdline string) string {
	s := cmdline
	for _, re := range r.res {
		s = re.ReplaceAllString(s, "${1}***${2}")
	}
	if len(s) > maxCommandLine {
		cut := maxCommandLine
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
