package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"fmt"
	"strconv"
	"strings"
)

// Templates use {...} placeholders rather than ${...} because the collector's
// config resolver already expands ${...} (environment variables of the
// collector itself) before the receiver sees its configuration.

type tmplKind int

const (
	tmplText tmplKind = iota
	tmplPid
	tmplEnv
	tmplCapture
	tmplCgroup
)

type tmplPart struct {
	kind tmplKind
	text string // literal text, env var name or capture name
	idx  int    // capture index
}

type template struct {
	parts []tmplPart
	envs  []string // environment variables the template reads
}

// templateValues are what a template is rendered from for one root process.
type templateValues struct {
	pid      int32
	captures []string // by capture index; nil without a regex
	env      map[string]string
	cgroup   string
}

func templateHasPlaceholder(s string) bool { return strings.Contains(s, "{") }

// isStatic reports whether the template renders without a process (fixed text).
func (t *template) isStatic() bool {
	for _, p := range t.parts {
		if p.kind != tmplText {
			return false
		}
	}
	return true
}

func parseTemplate(s string, captureNames []string, hasCgroup bool) (*template, error) {
	t := &template{}
	for len(s) > 0 {
		open := strings.IndexByte(s, '{')
		if open < 0 {
			t.parts = append(t.parts, tmplPart{kind: tmplText, text: s})
			break
		}
		if open > 0 {
			t.parts = append(t.parts, tmplPart{kind: tmplText, text: s[:open]})
		}
		end := strings.IndexByte(s[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("unclosed '{' in %q", s)
		}
		name := s[open+1 : open+end]
		s = s[open+end+1:]
		switch {
		case name == "pid":
			t.parts = append(t.parts, tmplPart{kind: tmplPid})
		case name == "cgroup":
			if !hasCgroup {
				return nil, fmt.Errorf("{cgroup} needs a cgroup selector")
			}
			t.parts = append(t.parts, tmplPart{kind: tmplCgroup})
		case strings.HasPrefix(name, "env:"):
			v := strings.TrimPrefix(name, "env:")
			if v == "" {
				return nil, fmt.Errorf("empty variable name in {env:}")
			}
			t.parts = append(t.parts, tmplPart{kind: tmplEnv, text: v})
			t.envs = append(t.envs, v)
		default:
			idx := -1
			for i, c := range captureNames {
				if c == name && name != "" {
					idx = i
				}
			}
			if idx < 0 {
				return nil, fmt.Errorf("unknown placeholder {%s}: use {pid}, {env:NAME}, {cgroup} or a named capture of selector.cmdline", name)
			}
			t.parts = append(t.parts, tmplPart{kind: tmplCapture, text: name, idx: idx})
		}
	}
	return t, nil
}

// render returns the text, and false when a value is missing (an unset
// environment variable or an empty capture): such a root cannot be named.
func (t *template) render(v *templateValues) (string, bool) {
	if t == nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range t.parts {
		switch p.kind {
		case tmplText:
			b.WriteString(p.text)
		case tmplPid:
			b.WriteString(strconv.Itoa(int(v.pid)))
		case tmplCgroup:
			if v.cgroup == "" {
				return "", false
			}
			b.WriteString(v.cgroup)
		case tmplEnv:
			val, ok := v.env[p.text]
			if !ok || val == "" {
				return "", false
			}
			b.WriteString(val)
		case tmplCapture:
			if p.idx >= len(v.captures) || v.captures[p.idx] == "" {
				return "", false
			}
			b.WriteString(v.captures[p.idx])
		}
	}
	return b.String(), true
}
