package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"net/http"
	"strings"
)

// Authentication is any collector auth extension, applied by confighttp in
// front of the API (config key auth). Two things around it are ours:
//   - its refusals are API errors: JSON, never cached, and with the challenge
//     RFC 9110 (11.6.1) requires on a 401 (httpError);
//   - the scheme of the Authorization header is case-insensitive (RFC 9110
//     11.1), but bearertokenauth compares the whole header with "Bearer
//     <token>", so "bearer <token>" was refused: the scheme is put in its
//     registered spelling before the auth extension sees it
//     (canonicalAuthScheme).

// challenges is the WWW-Authenticate challenge by auth extension type;
// extensions not listed get the Bearer challenge, the scheme of every token
// authenticator in contrib.
var challenges = map[string]string{ //nolint:gosec // G101: challenge headers (scheme and realm), no credentials
	"basicauth":       `Basic realm="workerwatch", charset="UTF-8"`,
	"bearertokenauth": `Bearer realm="workerwatch"`,
	"oidc":            `Bearer realm="workerwatch"`,
}

func authChallenge(cfg *Config) []string {
	if a := cfg.Auth.Get(); a != nil {
		if c, ok := challenges[a.Config.AuthenticatorID.Type().String()]; ok {
			return []string{c}
		}
	}
	return []string{`Bearer realm="workerwatch"`}
}

// httpError answers the errors confighttp raises before our handler runs
// (the auth extension's 401, a body it cannot decompress) the way every API
// error is answered, and counts them like every other request.
func (wh *workerHealth) httpError(w http.ResponseWriter, r *http.Request, msg string, code int) {
	h := w.Header()
	h["X-Content-Type-Options"] = hdrNosniff
	h["Cache-Control"] = hdrNoStore
	if code == http.StatusUnauthorized {
		h["Www-Authenticate"] = wh.challenge
		msg = "unauthorized: " + msg
	}
	wh.metrics.request(r.Context(), routeOf(r.URL.EscapedPath()), writeError(w, code, msg))
}

// authSchemes are the registered spellings of the HTTP authentication
// schemes (IANA registry), by their lower-case form.
var authSchemes = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{"Basic", "Bearer", "Digest", "HOBA", "Mutual", "Negotiate", "OAuth", "SCRAM-SHA-1", "SCRAM-SHA-256", "vapid"} {
		m[strings.ToLower(s)] = s
	}
	return m
}()

// canonicalAuthScheme puts the Authorization header's scheme in its
// registered spelling, followed by one space, before next (the auth
// extension) compares it. Requests already in that form are not copied.
func canonicalAuthScheme(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header["Authorization"]; len(v) == 1 {
			if c, changed := canonicalCredentials(v[0]); changed {
				r = r.WithContext(r.Context()) // a handler must not change its request
				r.Header = r.Header.Clone()
				r.Header["Authorization"] = []string{c}
			}
		}
		next.ServeHTTP(w, r)
	})
}

func canonicalCredentials(v string) (string, bool) {
	scheme, rest, ok := strings.Cut(v, " ")
	if !ok {
		return v, false
	}
	canon, known := authSchemes[strings.ToLower(scheme)]
	if !known {
		return v, false
	}
	params := strings.TrimLeft(rest, " \t")
	if canon == scheme && len(params) == len(rest) {
		return v, false
	}
	return canon + " " + params, true
}
