package requestguard

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
)

// FuzzTargetGuard: what the guard passes on does not depend on how the bytes
// arrive, is the input itself unless a request line had an invalid target,
// and every rewritten line names PathBadTarget.
func FuzzTargetGuard(f *testing.F) {
	for _, s := range []string{
		"GET /health/workers/a HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /health/workers/%zz HTTP/1.1\r\nHost: x\r\n\r\nGET /livez HTTP/1.1\r\n\r\n",
		"\r\nGET /%zz HTTP/1.0\r\n\r\n",
		"POST /x HTTP/1.1\r\nContent-Length: 9\r\n\r\nGET /%zz \n",
		"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /%zz HTTP/1.1\r\n\r\n",
		"GET * HTTP/1.1\r\n\r\nCONNECT %zz HTTP/1.1\r\n\r\n",
		"GET http://h/%4 HTTP/1.1\r\n\r\n",
		"GET /" + strings.Repeat("a", 5000) + "%z HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		whole := guarded(in, len(in)+1)
		if got := guarded(in, int(chunk)+1); !bytes.Equal(got, whole) {
			t.Fatalf("chunks of %d give %q, whole %q", int(chunk)+1, got, whole)
		}
		if !bytes.Contains(whole, []byte(PathBadTarget)) || bytes.Contains(in, []byte(PathBadTarget)) {
			if !bytes.Equal(whole, in) {
				t.Fatalf("nothing to rewrite, but %q became %q", in, whole)
			}
		}
	})
}

// guarded feeds in to a guard n bytes at a time and returns what it passes on.
func guarded(in []byte, n int) []byte {
	c := &targetGuardConn{}
	for len(in) > 0 {
		k := min(n, len(in))
		c.feed(in[:k])
		in = in[k:]
	}
	return append(c.out, c.line...)
}

func TestTargetGuardRewrites(t *testing.T) {
	in := "GET /ok HTTP/1.1\r\nHost: x\r\n\r\nHEAD /health/workers/%zz HTTP/1.1\r\nHost: x\r\n\r\n"
	want := "GET /ok HTTP/1.1\r\nHost: x\r\n\r\nHEAD " + PathBadTarget + " HTTP/1.1\r\nHost: x\r\n\r\n"
	for n := 1; n <= len(in); n++ {
		if got := string(guarded([]byte(in), n)); got != want {
			t.Fatalf("chunks of %d: %q", n, got)
		}
	}
}

// plainPath is only a shortcut: wherever it says yes, url.ParseRequestURI
// agrees.
func FuzzPlainPath(f *testing.F) {
	for _, s := range []string{"/health/workers/a", "/a:b", "//x", "/?q=%zz", "/\x7f", "/#frag", "/a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if plainPath([]byte(target)) {
			if _, err := url.ParseRequestURI(target); err != nil {
				t.Fatalf("plainPath(%q) but ParseRequestURI: %v", target, err)
			}
		}
	})
}

// BenchmarkTargetGuard is what the guard adds to a keep-alive connection's
// request: one request line and its headers fed through.
func BenchmarkTargetGuard(b *testing.B) {
	req := []byte("GET /health/workers/openfn-worker-04242 HTTP/1.1\r\nHost: 127.0.0.1:8090\r\nUser-Agent: wrk\r\n\r\n")
	c := &targetGuardConn{}
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	for b.Loop() {
		c.feed(req)
		c.out = c.out[:0]
	}
}
