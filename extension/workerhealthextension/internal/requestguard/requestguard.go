// Package requestguard makes net/http's refusal of a malformed request
// target an API error: on a cleartext listener it rewrites the target of an
// invalid HTTP/1 request line to PathBadTarget, which the router answers
// with a JSON 400. It knows nothing of the API beyond that path.
package requestguard // import "github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/requestguard"

import (
	"bytes"
	"net"
	"net/http"
	"net/url"
)

// net/http answers a request whose target is not a valid URL (a malformed
// "%" escape such as /health/workers/%zz) with its own plain-text 400, before
// any handler runs and with no way to hook it. The API promises a JSON error
// for every error, so on a cleartext listener each HTTP/1 request line is
// checked as it arrives (the same url.ParseRequestURI net/http applies), and
// the target of an invalid one is replaced by PathBadTarget, which the router
// answers with the JSON 400. Every other byte passes through unchanged.
//
// Limits, chosen to keep this small: behind TLS the listener is not wrapped
// (net/http must see the *tls.Conn to speak HTTP/2), and after a request with
// a body (no endpoint takes one: they are 405s) the rest of that connection
// is passed through, because finding the next request line would mean
// parsing bodies. Either way such a request gets net/http's own 400.

// PathBadTarget is the target a request with an invalid one is given. Asked
// for directly it gets the same 400, which is harmless.
const PathBadTarget = "/.invalid-request-target"

// maxRequestLine is what net/http itself buffers for a request's head
// (http.DefaultMaxHeaderBytes plus its 4096 bytes of slack): a longer line is
// refused by net/http anyway, so it is passed through rather than held.
const maxRequestLine = http.DefaultMaxHeaderBytes + 4096

// Listener wraps a cleartext listener: every connection it accepts has
// its invalid request targets rewritten (see the package comment).
type Listener struct{ net.Listener }

func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &targetGuardConn{Conn: c}, nil
}

type guardState uint8

const (
	inRequestLine guardState = iota
	inHeaders
	passThrough
)

// targetGuardConn rewrites invalid request targets on the way in. net/http
// never reads one connection from two goroutines at once, so it needs no lock.
type targetGuardConn struct {
	net.Conn
	state guardState
	// line holds the request line until its end is seen.
	line []byte
	// header is the start of the current header line (enough to tell
	// Content-Length and Transfer-Encoding apart); headerLen its length.
	header    [32]byte
	headerLen int
	hasBody   bool
	// out is what the next Reads return.
	out []byte
	buf [4096]byte
}

func (c *targetGuardConn) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		n, err := c.Conn.Read(c.buf[:])
		c.feed(c.buf[:n])
		if err != nil {
			// A held partial line is still owed; errors such as the
			// deadlines net/http uses to cancel a background read are
			// not final, so nothing is latched.
			if len(c.out) == 0 {
				return 0, err
			}
			break
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	if len(c.out) == 0 {
		c.out = c.out[:0:0]
	}
	return n, nil
}

func (c *targetGuardConn) feed(b []byte) {
	for len(b) > 0 {
		switch c.state {
		case passThrough:
			c.out = append(c.out, b...)
			return
		case inRequestLine:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				c.line = append(c.line, b...)
				if len(c.line) > maxRequestLine {
					c.out, c.line = append(c.out, c.line...), nil
					c.state = passThrough
				}
				return
			}
			c.line = append(c.line, b[:i+1]...)
			b = b[i+1:]
			c.out = append(c.out, checkedRequestLine(c.line)...)
			// An empty line before a request is allowed (RFC 9112 2.2).
			if len(bytes.TrimRight(c.line, "\r\n")) > 0 {
				c.state, c.headerLen, c.hasBody = inHeaders, 0, false
			}
			c.line = c.line[:0]
		case inHeaders:
			i := bytes.IndexByte(b, '\n')
			chunk := b
			if i >= 0 {
				chunk = b[:i+1]
			}
			c.out = append(c.out, chunk...)
			if c.headerLen < len(c.header) {
				c.headerLen += copy(c.header[c.headerLen:], chunk)
			} else {
				c.headerLen += len(chunk)
			}
			b = b[len(chunk):]
			if i < 0 {
				return
			}
			c.endHeaderLine()
		}
	}
}

// endHeaderLine is called at each header line's '\n'.
func (c *targetGuardConn) endHeaderLine() {
	h := c.header[:min(c.headerLen, len(c.header))]
	c.headerLen = 0
	if len(bytes.TrimRight(h, "\r\n")) == 0 {
		if c.hasBody {
			c.state = passThrough
		} else {
			c.state = inRequestLine
		}
		return
	}
	name, value, _ := bytes.Cut(h, []byte(":"))
	switch {
	case bytes.EqualFold(bytes.TrimSpace(name), []byte("Transfer-Encoding")):
		c.hasBody = true
	case bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")):
		if v := bytes.TrimSpace(value); len(v) != 1 || v[0] != '0' {
			c.hasBody = true
		}
	}
}

// plainPath reports whether target is an origin-form path without escapes
// or control bytes: url.ParseRequestURI accepts every such target, so the
// hot path skips parsing (and allocating) it.
func plainPath(target []byte) bool {
	if len(target) == 0 || target[0] != '/' {
		return false
	}
	for _, b := range target {
		if b == '%' || b < 0x21 || b == 0x7f {
			return false
		}
	}
	return true
}

// checkedRequestLine returns line, or line with its target replaced by
// PathBadTarget when net/http would refuse the target. It splits the line
// as net/http's parseRequestLine does.
func checkedRequestLine(line []byte) []byte {
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || string(method) == http.MethodConnect || string(target) == "*" {
		return line
	}
	if plainPath(target) {
		return line // the usual request: nothing url.ParseRequestURI could refuse
	}
	if _, err := url.ParseRequestURI(string(target)); err == nil {
		return line
	}
	out := make([]byte, 0, len(method)+len(PathBadTarget)+len(proto)+2)
	out = append(out, method...)
	out = append(out, ' ')
	out = append(out, PathBadTarget...)
	out = append(out, ' ')
	return append(out, proto...)
}
